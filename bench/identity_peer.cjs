// Bluesky's own TypeScript resolver (@atproto/identity, as the test network's reference PDS
// installs it) doing what the Python SDK does in `bench cold`: handle -> DID -> document, no
// bidirectional check, at a fixed concurrency. Pointed at the test network the same way:
// DNS through the test nameserver (TXT, and A for every connection), ":443" mapped to the
// test network's TLS port, its CA trusted (NODE_EXTRA_CA_CERTS).
//
//   node bench/identity_peer.cjs CONFIG_JSON
//   CONFIG_JSON: {"pds_dir", "dns_server", "https_port", "plc_url", "expected" (handle ->
//                 its right DID), "lookups", "concurrency"}
// Prints one JSON line: {"lookups", "ok", "seconds", "cpu_seconds", "latencies"}.
'use strict'

const { createRequire } = require('node:module')
const path = require('node:path')
const dns = require('node:dns')
const net = require('node:net')

const config = JSON.parse(process.argv[2])
const fromPds = createRequire(path.join(config.pds_dir, 'package.json'))
const { IdResolver } = fromPds('@atproto/identity')
const undici = fromPds('undici')

dns.setServers([config.dns_server])
dns.promises.setServers([config.dns_server])

const tls = undici.buildConnector({})
undici.setGlobalDispatcher(
  new undici.Agent({
    connect(options, callback) {
      const address = net.isIP(options.hostname)
        ? Promise.resolve([options.hostname])
        : dns.promises.resolve4(options.hostname)
      address.then(
        ([address]) =>
          tls(
            {
              ...options,
              hostname: address,
              servername: options.hostname,
              port: String(options.port) === '443' || !options.port ? config.https_port : options.port,
            },
            callback,
          ),
        (err) => callback(err, null),
      )
    },
  }),
)

async function main() {
  const resolver = new IdResolver({ plcUrl: config.plc_url, timeout: 5000 })
  const handles = Object.keys(config.expected)
  const work = Array.from({ length: config.lookups }, (_, i) => handles[i % handles.length])
  const latencies = []
  let ok = 0
  let next = 0
  async function worker() {
    while (next < work.length) {
      const handle = work[next++]
      const started = process.hrtime.bigint()
      try {
        const did = await resolver.handle.resolve(handle)
        // a wrong DID is not a correct answer, however fast
        const document = did === config.expected[handle] ? await resolver.did.resolve(did) : null
        if (document) ok += 1
      } catch {
        // a failed lookup is not throughput
      }
      latencies.push(Number(process.hrtime.bigint() - started) / 1e9)
    }
  }
  const cpu = process.cpuUsage()
  const started = process.hrtime.bigint()
  await Promise.all(Array.from({ length: config.concurrency }, worker))
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  const used = process.cpuUsage(cpu)
  const cpuSeconds = (used.user + used.system) / 1e6
  console.log(JSON.stringify({ lookups: work.length, ok, seconds, cpu_seconds: cpuSeconds, latencies }))
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
