// Resolve DIDs with @atproto/identity's DidResolver (by others, from npm), unmodified, pointed
// at a PLC directory: the client the atwhois PLC mirror must satisfy as the directory does.
//
//   node resolve.js PLC_URL < dids.json   prints {did: document | null | {error, status}}
'use strict'

const { DidResolver } = require('@atproto/identity')

async function main () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const dids = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const resolver = new DidResolver({ plcUrl: process.argv[2], timeout: 10000 })
  const out = {}
  for (const did of dids) {
    try {
      out[did] = await resolver.resolve(did, true)
    } catch (err) {
      out[did] = { error: String(err && err.message), status: err && err.status }
    }
  }
  console.log(JSON.stringify(out))
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
