// bin/ctxagent with a V8 flag set by v8.setFlagsFromString against as it is, in the same
// run: --version start-up (interleaved), and per-turn overhead and peak RSS of run
// (bench/turn.mjs's task, copies alternating). Not a suite of `npm run bench`:
//   node bench/turn-flag.mjs [turns] [pairs] [flag]   (default 3000 2 --semi-space-growth-factor=1)
import { execFileSync } from 'node:child_process'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ROOT, timeInterleaved } from './lib.mjs'
import { summarize, timedRun } from './turn.mjs'

const [turnsArg, pairsArg, flag = '--semi-space-growth-factor=1'] = process.argv.slice(2)
const turns = Number(turnsArg ?? 3000)
const pairs = Number(pairsArg ?? 2)
const BIN = join(ROOT, 'bin', 'ctxagent')
// Beside bin/ctxagent, so that it finds the bundle the same way.
const flagged = join(ROOT, 'bin', '.bench-v8-flag.mjs')
const text = readFileSync(BIN, 'utf8').replace(
  "import { fileURLToPath } from 'node:url'\n",
  `import { fileURLToPath } from 'node:url'\nimport { setFlagsFromString } from 'node:v8'\nsetFlagsFromString(${JSON.stringify(flag)})\n`,
)
if (!text.includes('setFlagsFromString(')) throw new Error('could not add the flag to a copy of bin/ctxagent')
writeFileSync(flagged, text)
try {
  const version = (bin) => () => execFileSync(process.execPath, [bin, '--version'], { stdio: ['ignore', 'pipe', 'pipe'] })
  const [plain, withFlag] = await timeInterleaved([version(BIN), version(flagged)], 21)
  const out = { flag, turns, startup: { without: plain, with: withFlag, ratio: withFlag / plain }, runs: [] }
  for (let p = 0; p < pairs; p++) {
    // ABBA order over the pairs: a drift in load hits both alike.
    const order =
      p % 2 === 0
        ? [
            ['with', flagged],
            ['without', BIN],
          ]
        : [
            ['without', BIN],
            ['with', flagged],
          ]
    for (const [name, bin] of order) {
      const r = await timedRun(turns, [], bin)
      const s = summarize(r)
      out.runs.push({
        name,
        load: r.load,
        wallS: r.wallS,
        cpu: r.cpu,
        hwm: Object.fromEntries(r.hwm),
        normalMedian: s.normalMedian,
        at: Object.fromEntries(Object.entries(s.at).map(([k, v]) => [k, v.overhead])),
        slope: s.slope.usPerKb,
        compactionMedian: s.compactionMedian,
      })
      process.stderr.write(`${JSON.stringify(out.runs.at(-1))}\n`)
    }
  }
  process.stdout.write(`${JSON.stringify(out, null, 1)}\n`)
} finally {
  rmSync(flagged, { force: true })
}
