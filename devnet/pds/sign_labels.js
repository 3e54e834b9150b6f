// Sign labels as the reference labeler does, with the reference's own packages as installed
// (by others, from npm): the procedure of @atproto/ozone's `signLabel`
// (packages/ozone/src/mod-service/util.ts: `ver` defaults to 1, `neg` kept only when true,
// undefined fields dropped, `cborEncode`, the keypair's `sign`), @atproto/common's
// `cborEncode` and `noUndefinedVals`, @atproto/crypto's `Secp256k1Keypair`, and the frames
// @atproto/xrpc-server's `MessageFrame` and `ErrorFrame` make for `subscribeLabels`.
// What it prints is kept in tests/vectors/labels/ (devnet/labels.py is held to it).
//
//   node sign_labels.js < request.json   request: {secret (hex), seq, labels: [label, ...]}
//   prints {did_key, cases: [{input, signed_bytes (hex), label (JSON form), frame (base64)}],
//           info_frame, error_frame}
'use strict'

const { cborEncode, noUndefinedVals } = require('@atproto/common')
const { Secp256k1Keypair } = require('@atproto/crypto')
const { lexToJson } = require('@atproto/lex-json')
const { ErrorFrame, MessageFrame } = require('@atproto/xrpc-server')

async function signLabel (label, keypair) {
  const { ver, src, uri, cid, val, neg, cts, exp } = label
  const reformatted = noUndefinedVals({
    ver: ver ?? 1,
    src,
    uri,
    cid,
    val,
    neg: neg === true ? true : undefined,
    cts,
    exp
  })
  const bytes = cborEncode(reformatted)
  return { bytes, signed: { ...reformatted, sig: await keypair.sign(bytes) } }
}

async function main () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const request = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const keypair = await Secp256k1Keypair.import(request.secret)
  const cases = []
  let seq = request.seq
  for (const input of request.labels) {
    const { bytes, signed } = await signLabel(input, keypair)
    const frame = new MessageFrame({ seq: seq++, labels: [signed] }, { type: '#labels' })
    cases.push({
      input,
      signed_bytes: Buffer.from(bytes).toString('hex'),
      label: lexToJson(signed),
      frame: Buffer.from(frame.toBytes()).toString('base64')
    })
  }
  const info = new MessageFrame({ name: 'OutdatedCursor' }, { type: '#info' })
  const error = new ErrorFrame({ error: 'FutureCursor', message: 'Cursor in the future.' })
  console.log(JSON.stringify({
    did_key: keypair.did(),
    cases,
    info_frame: Buffer.from(info.toBytes()).toString('base64'),
    error_frame: Buffer.from(error.toBytes()).toString('base64')
  }, null, 2))
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
