// Start-up of the bundled CLI against the unbundled one; stats over 100,000 real task directories; view of a task whose
// messages.jsonl is 1 GiB, and of one with 5,000 summaries; cleanup's gzip of 1 GiB of
// task files against pigz -6 with 2 threads.
import { execFileSync, spawnSync } from 'node:child_process'
import { closeSync, copyFileSync, mkdirSync, openSync, readdirSync, statSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { readOverview } from '../dist/storage/task/reader.js'
import { cloneTasks, makeRealTasks } from './real-tasks.mjs'
import { agentText, median, remove, ROOT, rng, scratch, timeInterleaved, timeMedian, uuidN, writeBenchTask } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')
const ctxagent = (args) => execFileSync(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 })

// BENCH_ROWS=view,view-summaries runs only those rows (of: startup, stats, view, view-summaries, cleanup).
const ROWS = { startup: startupBench, stats: statsBench, view: viewBench, 'view-summaries': viewSummariesBench, cleanup: cleanupBench }

export async function run() {
  const wanted = process.env.BENCH_ROWS ? process.env.BENCH_ROWS.split(',').map((r) => r.trim()) : Object.keys(ROWS)
  const unknown = wanted.filter((r) => !(r in ROWS))
  if (unknown.length > 0) throw new Error(`BENCH_ROWS: no operator row ${unknown.join(', ')} (rows: ${Object.keys(ROWS).join(', ')})`)
  const results = []
  for (const [name, bench] of Object.entries(ROWS)) if (wanted.includes(name)) results.push(...(await bench()))
  return results
}

async function startupBench() {
  const node = (args) => execFileSync(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  const unbundled = `import(${JSON.stringify(join(ROOT, 'dist', 'cli.js'))}).then((cli) => cli.main(['node', 'ctxagent', '--version']))`
  const [bare, bundled, modules] = await timeInterleaved(
    [() => node(['-e', '0']), () => ctxagent(['--version']), () => node(['--input-type=module', '-e', unbundled])],
    11,
  )
  const ratio = (bundled - bare) / (modules - bare)
  return [
    {
      name: 'startup',
      what: 'ctxagent --version from the bundle (what bin/ctxagent runs) vs from the ~60 modules of dist/, each less a bare node -e 0',
      measured: `${bundled.toFixed(0)} ms (modules ${modules.toFixed(0)} ms, bare node ${bare.toFixed(0)} ms)`,
      ratio: `${ratio.toFixed(2)}× the module load time`,
      target: 'faster than the modules (< 1×)',
      pass: ratio < 1,
    },
  ]
}

const STATS_TASKS = 100_000

async function statsBench() {
  const base = scratch('stats')
  const templates = scratch('stats-templates')
  try {
    // 200 completed tasks written by ctxagent's own code (create, messages, tools, a summary,
    // complete), copied to 100,000 (only the uuid in metadata.json changes), indexed by reindex.
    await makeRealTasks(templates, 1, 200, { index: false })
    cloneTasks(templates, base, STATS_TASKS)
    ctxagent(['reindex', '--home', base])
    const [stats, startup] = await timeInterleaved([() => ctxagent(['stats', '--json', '--home', base]), () => ctxagent(['--version'])], 5)
    const total = JSON.parse(ctxagent(['stats', '--json', '--home', base]).toString()).total
    if (total !== STATS_TASKS) throw new Error(`stats counted ${total} tasks, expected ${STATS_TASKS}`)
    return [
      {
        name: 'stats',
        what: 'stats --json over 100,000 completed task directories written by ctxagent (200 made by createTask … complete, copied with new uuids) and indexed by ctxagent reindex; whole command, the drift check listing their directories included, vs ctxagent --version',
        measured: `${(stats / 1000).toFixed(2)} s (start-up alone ${(startup / 1000).toFixed(2)} s)`,
        ratio: `${(stats / startup).toFixed(1)}× start-up; ${(1000 / stats).toFixed(1)}× under the limit`,
        target: '≤ 1 s',
        pass: stats <= 1000,
      },
    ]
  } finally {
    remove(base)
    remove(templates)
  }
}

async function viewBench() {
  const base = scratch('view')
  try {
    const uuid = uuidN(1)
    const dir = join(base, 'completed', uuid)
    writeBenchTask(dir, uuid, rng(6), { messages: 1 })
    const file = join(dir, 'messages.jsonl')
    const fd = openSync(file, 'w')
    const random = rng(9)
    const texts = Array.from({ length: 64 }, () => agentText(random, 300 + Math.floor(random() * 3700)))
    let written = 0
    let seq = 0
    while (written < 1024 ** 3) {
      const lines = []
      for (let k = 0; k < 1000; k++) {
        seq++
        lines.push(
          JSON.stringify({ seq, role: seq % 2 ? 'assistant' : 'tool', content: texts[seq % 64], timestamp: '2024-01-15T10:30:00.000Z', token_count: 500 }),
        )
      }
      const chunk = `${lines.join('\n')}\n`
      writeSync(fd, chunk)
      written += Buffer.byteLength(chunk)
    }
    closeSync(fd)
    const ref = { uuid, location: 'completed', dir }
    const overview = await timeMedian(async () => {
      const o = await readOverview(ref)
      if (o.last_messages.at(-1)?.seq !== seq) throw new Error('overview missed the last message')
    }, 21)
    const [command, startup] = await timeInterleaved([() => ctxagent(['view', uuid, '--json', '--home', base]), () => ctxagent(['--version'])], 5)
    const scan = await timeMedian(() => execFileSync('wc', ['-l', file]), 3, false)
    return [
      {
        name: 'view',
        what: `view overview of a task whose messages.jsonl is ${(statSync(file).size / 1024 ** 3).toFixed(2)} GiB (${seq.toLocaleString('en')} lines) vs wc -l of that file`,
        measured: `${overview.toFixed(1)} ms in-process; whole command ${(command).toFixed(0)} ms, of which node start-up ${startup.toFixed(0)} ms`,
        ratio: `${Math.round(scan / overview).toLocaleString('en')}× faster than wc -l (${(scan / 1000).toFixed(2)} s)`,
        target: '≤ 200 ms (overview; start-up excluded)',
        pass: overview <= 200 && command - startup <= 200,
      },
    ]
  } finally {
    remove(base)
  }
}

/** view's overview of a task with 5,000 summaries (written by the task's own handle), whole command, vs --version. */
async function viewSummariesBench() {
  const base = scratch('view-summaries')
  try {
    await makeRealTasks(base, 1, 1, { summaries: 5_000, index: false })
    // The same task with one summary: what the view command costs whatever the summaries.
    await makeRealTasks(base, 2, 1, { summaries: 1, index: false })
    const uuid = uuidN(1)
    const overview = JSON.parse(ctxagent(['view', uuid, '--json', '--home', base]).toString())
    const text = JSON.stringify(overview)
    if (!text.includes('step 4999')) throw new Error('the overview does not show the last summary')
    const [command, one, startup] = await timeInterleaved(
      [() => ctxagent(['view', uuid, '--json', '--home', base]), () => ctxagent(['view', uuidN(2), '--json', '--home', base]), () => ctxagent(['--version'])],
      21,
    )
    const size = statSync(join(base, 'completed', uuid, 'summaries.jsonl')).size
    return [
      {
        name: 'view-summaries',
        what: `view overview (--json) of a completed task with 5,000 summaries (summaries.jsonl ${(size / 1024).toFixed(0)} KB, written by the task's handle), whole command, vs ctxagent --version`,
        measured: `${command.toFixed(1)} ms (--version ${startup.toFixed(1)} ms; view of the same task with 1 summary ${one.toFixed(1)} ms)`,
        ratio: `${(command - startup).toFixed(1)} ms more than --version (${(command - one).toFixed(1)} ms more than 1 summary)`,
        target: '≤ 5 ms more than --version',
        pass: command - startup <= 5,
      },
    ]
  } finally {
    remove(base)
  }
}

async function cleanupBench() {
  const pigz = spawnSync('pigz', ['--version']).status === 0
  if (!pigz) {
    return [
      {
        name: 'cleanup',
        what: 'cleanup gzip vs pigz -6 -p 2',
        measured: 'not run: pigz is not installed (apt-get install pigz)',
        ratio: '-',
        target: 'ratio ≥ 0.9, RSS ≤ 150 MB',
        pass: false,
      },
    ]
  }
  const base = scratch('cleanup')
  try {
    // 16 completed tasks of 64 MiB each: 1 GiB of task files.
    const random = rng(8)
    const texts = Array.from({ length: 64 }, () => agentText(random, 300 + Math.floor(random() * 3700)))
    const template = join(base, 'template.jsonl')
    const fd = openSync(template, 'w')
    let written = 0
    let seq = 0
    while (written < 64 * 1024 ** 2) {
      seq++
      const line = `${JSON.stringify({ seq, role: 'tool', content: texts[(seq * 7) % 64] + texts[seq % 64].slice(0, seq % 500), timestamp: '2024-01-15T10:30:00.000Z', token_count: 500 })}\n`
      writeSync(fd, line)
      written += Buffer.byteLength(line)
    }
    closeSync(fd)
    const setup = () => {
      remove(join(base, 'completed'))
      remove(join(base, 'pigz'))
      mkdirSync(join(base, 'pigz'), { recursive: true })
      for (let i = 1; i <= 16; i++) {
        const dir = join(base, 'completed', uuidN(i))
        writeBenchTask(dir, uuidN(i), random, { messages: 1 })
        copyFileSync(template, join(dir, 'messages.jsonl'))
        copyFileSync(template, join(base, 'pigz', `${i}.jsonl`))
      }
    }
    const bytes = 16 * statSync(template).size
    const ours = []
    const theirs = []
    const rss = []
    for (let r = 0; r < 3; r++) {
      setup()
      let t = process.hrtime.bigint()
      const res = spawnSync(
        '/usr/bin/time',
        ['-f', '%M', process.execPath, BIN, 'cleanup', '--compress-after', '0s', '--delete-after', '36500d', '--home', base],
        { encoding: 'utf8' },
      )
      ours.push(Number(process.hrtime.bigint() - t) / 1e6)
      rss.push(Number(res.stderr.trim().split('\n').at(-1)) / 1024)
      if (readdirSync(join(base, 'completed', uuidN(1))).includes('messages.jsonl')) throw new Error('cleanup did not compress')
      t = process.hrtime.bigint()
      execFileSync('sh', ['-c', `pigz -6 -p 2 "${join(base, 'pigz')}"/*.jsonl`])
      theirs.push(Number(process.hrtime.bigint() - t) / 1e6)
    }
    const ratio = median(theirs) / median(ours)
    const peak = Math.max(...rss)
    return [
      {
        name: 'cleanup',
        what: `cleanup gzip of ${(bytes / 1024 ** 3).toFixed(2)} GiB in 16 completed tasks vs pigz -6 -p 2 on the same files`,
        measured: `${(bytes / 1024 ** 2 / (median(ours) / 1000)).toFixed(0)} MB/s (pigz ${(bytes / 1024 ** 2 / (median(theirs) / 1000)).toFixed(0)} MB/s); peak RSS ${peak.toFixed(0)} MB`,
        ratio: `throughput ratio ${ratio.toFixed(2)}`,
        target: 'ratio ≥ 0.9 and RSS ≤ 150 MB',
        pass: ratio >= 0.9 && peak <= 150,
      },
    ]
  } finally {
    remove(base)
  }
}
