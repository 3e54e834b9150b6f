"""The daemon (`atwhois serve`): the aiohttp application serving the com.atproto.identity
XRPC methods and atwhois's own `/v1` reports from a `CachedResolver`, with its metrics and
OpenAPI description."""

from .service import Service, Settings
from .xrpc_errors import XrpcError

__all__ = ["Service", "Settings", "XrpcError"]
