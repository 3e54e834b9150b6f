// getRecord proofs verified by @atproto/repo's own `verifyProofs` (by others, from npm: the
// copy the test network's reference PDS depends on and installs, unmodified): the baseline
// of `python -m bench records`, on the very CAR bytes atwhois verifies.
//
//   node bench/record_proofs_peer.cjs PDS_DIR PROOFS_JSON
//   PROOFS_JSON: {"did", "key" (the did:key), "proofs": [{"collection", "rkey", "cid" (the
//                 record's, or null: a proof of absence), "car" (base64)}]}
// Prints {"ready", "repo" (its version)}, then, for each line "round" it reads, verifies
// every proof once, in order, and prints {"verified", "seconds", "errors"}: a proof counts
// when its one claim comes back verified; one that throws is named (the first five). Only
// the calls to verifyProofs are timed: the CARs are decoded from base64 before any round.
'use strict'

const { createRequire } = require('node:module')
const fs = require('node:fs')
const path = require('node:path')
const readline = require('node:readline')

const fromPds = createRequire(path.join(process.argv[2], 'package.json'))
const { verifyProofs } = fromPds('@atproto/repo')
const version = fromPds('@atproto/repo/package.json').version
// the CID type the package itself compares claims with (its own copy of lex-data)
const fromRepo = createRequire(fromPds.resolve('@atproto/repo/package.json'))
const { parseCid } = fromRepo('@atproto/lex-data')

async function round (input, proofs) {
  let verified = 0
  const errors = []
  const started = process.hrtime.bigint()
  for (const proof of proofs) {
    try {
      const result = await verifyProofs(proof.car, [proof.claim], input.did, input.key)
      if (result.verified.length === 1) verified++
    } catch (err) {
      if (errors.length < 5) errors.push(String(err && err.message))
    }
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  return { verified, seconds, errors }
}

async function main () {
  const input = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'))
  const proofs = input.proofs.map((p) => ({
    car: new Uint8Array(Buffer.from(p.car, 'base64')),
    claim: { collection: p.collection, rkey: p.rkey, cid: p.cid === null ? null : parseCid(p.cid) }
  }))
  console.log(JSON.stringify({ ready: proofs.length, repo: version }))
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (line.trim() === 'round') console.log(JSON.stringify(await round(input, proofs)))
  }
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
