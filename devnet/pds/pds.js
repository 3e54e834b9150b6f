const { PDS, envToCfg, envToSecrets, readEnv } = require('@atproto/pds')
async function main() {
  const env = readEnv()
  const pds = await PDS.create(envToCfg(env), envToSecrets(env))
  // PDS.start() listens on every interface: the test network keeps to loopback.
  const listen = pds.app.listen.bind(pds.app)
  pds.app.listen = (port) => listen(port, '127.0.0.1')
  await pds.start()
  console.log(`listening ${env.port}`)
}
main().catch((err) => { console.error(err); process.exit(1) })
