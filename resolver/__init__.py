"""atwhois resolver: ATProto handle and DID resolution with bidirectional verification."""
