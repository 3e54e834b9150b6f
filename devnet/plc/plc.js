// The reference PLC directory (npm @did-plc/server) on 127.0.0.1, and a seeder that submits
// real signed operations made by @did-plc/lib from fixed keys.
//
//   node plc.js serve   env PLC_DB_URL, PLC_DB_SCHEMA, PLC_PORT; prints "listening <port>"
//   node plc.js seed URL < plan.json   prints {name: {did, cids}} as JSON
//
// The package's own start() listens on every interface, so the server is built from the
// package's exports and listens on loopback here.
'use strict'

const { PlcServer, Database } = require('@did-plc/server')
const plc = require('@did-plc/lib')
const { Secp256k1Keypair } = require('@atproto/crypto')
const { cidForCbor } = require('@atproto/common')

async function serve () {
  const schema = process.env.PLC_DB_SCHEMA
  const db = Database.postgres({ url: process.env.PLC_DB_URL, schema })
  await db.db.schema.createSchema(schema).ifNotExists().execute()
  await db.migrateToLatestOrThrow()
  const server = PlcServer.create({ db, port: Number(process.env.PLC_PORT) })
  const http = server.app.listen(Number(process.env.PLC_PORT), '127.0.0.1')
  http.on('listening', () => console.log(`listening ${http.address().port}`))
  const stop = async () => {
    http.close()
    await db.db.schema.dropSchema(schema).ifExists().cascade().execute()
    await db.close()
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

async function readStdin () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

// plan: {keys: {name: privateKeyHex}, identities: [{name, steps: [step]}]}
async function seed (url) {
  const plan = await readStdin()
  const client = new plc.Client(url)
  const keys = {}
  for (const [name, hex] of Object.entries(plan.keys)) {
    keys[name] = await Secp256k1Keypair.import(hex)
  }
  const didKey = (ref) => (ref.startsWith('did:key:') ? ref : keys[ref].did())
  const out = {}
  for (const identity of plan.identities) {
    const ops = []
    let did = null
    for (const step of identity.steps) {
      const signer = keys[step.signer]
      const base = step.fork === undefined ? ops[ops.length - 1] : ops[step.fork]
      let op
      if (step.op === 'create') {
        const unsigned = {
          type: 'plc_operation',
          rotationKeys: step.rotationKeys.map(didKey),
          verificationMethods: { atproto: didKey(step.signingKey) },
          alsoKnownAs: step.alsoKnownAs,
          services: { atproto_pds: { type: 'AtprotoPersonalDataServer', endpoint: step.pds } },
          prev: null
        }
        op = await plc.signOperation(unsigned, signer)
        did = await plc.didForCreateOp(op)
      } else if (step.op === 'tombstone') {
        op = await plc.tombstoneOp(await cidForCbor(base), signer)
      } else {
        op = await plc.createUpdateOp(base, signer, (normalized) => {
          const next = { ...normalized }
          if (step.alsoKnownAs) next.alsoKnownAs = step.alsoKnownAs
          if (step.signingKey) next.verificationMethods = { ...next.verificationMethods, atproto: didKey(step.signingKey) }
          if (step.rotationKeys) next.rotationKeys = step.rotationKeys.map(didKey)
          if (step.pds) next.services = { ...next.services, atproto_pds: { type: 'AtprotoPersonalDataServer', endpoint: step.pds } }
          return next
        })
      }
      await client.sendOperation(did, op)
      ops.push(op)
    }
    const cids = []
    for (const op of ops) cids.push((await cidForCbor(op)).toString())
    out[identity.name] = { did, cids }
  }
  console.log(JSON.stringify(out))
}

// request: {did, key: privateKeyHex, op: "handle" | "tombstone", handle?}
async function update (url) {
  const request = await readStdin()
  const client = new plc.Client(url)
  const signer = await Secp256k1Keypair.import(request.key)
  const last = await client.getLastOp(request.did)
  const op = request.op === 'tombstone'
    ? await plc.tombstoneOp(await cidForCbor(last), signer)
    : await plc.createUpdateOp(last, signer, (normalized) => ({ ...normalized, alsoKnownAs: [`at://${request.handle}`] }))
  await client.sendOperation(request.did, op)
}

const [command, arg] = process.argv.slice(2)
const commands = { serve: () => serve(), seed: () => seed(arg), update: () => update(arg) }
const run = commands[command] ? commands[command]() : Promise.reject(new Error('usage: plc.js serve|seed URL|update URL'))
run.catch((err) => {
  console.error(err && err.response ? JSON.stringify(err.response.data) : err)
  process.exit(1)
})
