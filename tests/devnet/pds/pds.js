const { PDS, envToCfg, envToSecrets, readEnv } = require('@atproto/pds')
async function main() {
  const env = readEnv()
  const pds = await PDS.create(envToCfg(env), envToSecrets(env))
  await pds.start()
  console.log(`listening ${env.port}`)
}
main().catch((err) => { console.error(err); process.exit(1) })
