// One monitor pass without watch-locks' singleton lock: for testing that the
// per-task takeover alone keeps two reapers from acting on one task twice.
import { parseConfig } from '../../dist/config/load.js'
import { Layout } from '../../dist/storage/fs/layout.js'
import { monitorPass } from '../../dist/operations/monitor.js'

const [base] = process.argv.slice(2)
const env = { layout: new Layout(base), config: parseConfig(''), index: null, now: () => new Date(), warn: () => undefined }
const result = await monitorPass(env, { policy: { staleAfterMs: 1000 }, longRunningMs: 1e12 })
for (const f of result.findings) process.stdout.write(`${JSON.stringify(f)}\n`)
