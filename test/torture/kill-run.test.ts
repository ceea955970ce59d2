import { spawn } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'
import { BIN, cliAsync, ROOT, findingsText } from '../helpers/run.js'
import { exitOf, sleep } from '../helpers/wait.js'
import { expectWellFormed } from '../run/harness.js'
import { danglingBlobs, litter, strayLocks } from './checks.js'
import { record } from './report.js'

const RUNS = Number(process.env.CTXAGENT_TORTURE_RUNS ?? 8)
const AT_ONCE = 4

/** Every complete line of a JSON Lines file parses; only a last line without its newline may be torn. */
function completeLines(path: string): Record<string, unknown>[] {
  if (!existsSync(path)) return []
  const text = readFileSync(path, 'utf8')
  const lines = text.split('\n')
  lines.pop() // after the last newline: empty, or a torn line the writer will cut
  return lines.map((l) => JSON.parse(l) as Record<string, unknown>)
}

describe('torture: run processes killed at random instants', () => {
  it(`${RUNS} agents SIGKILLed mid-work: files readable, seq continuous, half resumed to completion, the rest reaped once, tasks.db equal to the tree`, {
    timeout: 900_000,
  }, async () => {
    const tree = makeTree()
    const ws = join(tree.base, '..', `${tree.base.split('/').pop()}-ws`)
    const { mkdirSync, rmSync } = await import('node:fs')
    mkdirSync(ws, { recursive: true })
    // Every third file is over context.blobs.threshold_bytes (8 KB): its reads go to blobs/, which a kill may cut short.
    for (let i = 0; i < 20; i++) writeFileSync(join(ws, `f${i}.txt`), `file ${i}\n${'text '.repeat(i % 3 === 0 ? 3000 : 200)}\n`)
    const fake = await startFakeLlm()
    let n = 0
    // Each agent's task ends after its 14th request, over its first run and its resume: counted per
    // agent (its statement names it, and a compaction keeps the statement verbatim), not from the
    // window, which compactions and prune steps shorten.
    const seen = new Map<string, number>()
    fake.fallback = (req) => {
      if (!Array.isArray(req.body.tools)) return { content: '## Original Task\nread the files\n## Current State\n- reading' }
      const agent = /\(agent (\d+)\)/.exec(JSON.stringify(req.body.messages))?.[1] ?? 'unnamed'
      const turns = (seen.get(agent) ?? 0) + 1
      seen.set(agent, turns)
      if (turns >= 14) return { content: 'all files read' }
      return {
        delayMs: 20,
        calls: [
          { name: 'read_file', arguments: { path: `f${n++ % 20}.txt` } },
          { name: 'glob', arguments: { pattern: `f${n % 7}*` } },
        ],
      }
    }
    const config = join(tree.base, 'config.yaml')
    writeFileSync(
      config,
      fake.configYaml(
        'locks:\n  heartbeat_seconds: 0.3\n  stale_after_seconds: 1\ncontext:\n  compression:\n    keep_recent: 4\n    min_to_compress: 2\n    token_threshold: 2500\n',
      ),
    )
    const common = ['--home', tree.base, '--config', config]
    const env = { ...process.env, NO_COLOR: '1', CTXAGENT_HOME: '', CTXAGENT_CONFIG: '' }

    // Each agent is killed after a random number of its own requests (2-8) and a random instant
    // within that turn: counted by events, not by wall-clock time, so that on a loaded machine an
    // agent still killed while node starts cannot leave no task at all (issue #29).
    const requestsOf = (agent: number) => fake.requests.filter((r) => JSON.stringify(r.body.messages[1]?.content ?? '').includes(`(agent ${agent})`)).length
    for (let i = 0; i < RUNS; i += AT_ONCE) {
      await Promise.all(
        Array.from({ length: Math.min(AT_ONCE, RUNS - i) }, async (_, j) => {
          const agent = i + j
          const child = spawn(process.execPath, [BIN, 'run', '--task', `read every file (agent ${agent})`, '--workspace', ws, ...common], {
            cwd: ROOT,
            env,
            stdio: 'ignore',
          })
          const exited = exitOf(child)
          const target = 2 + Math.floor(Math.random() * 7)
          let gone = false
          void exited.then(() => (gone = true))
          while (!gone && requestsOf(agent) < target) await sleep(5)
          await sleep(Math.random() * 30)
          child.kill('SIGKILL')
          await exited
        }),
      )
    }
    // Task directories only: a process killed while taking its lock leaves its temp beside them (watch-locks removes it).
    const uuids = tree.layout.list('running')
    const finished = tree.layout.list('completed')
    // A process killed while node was still starting leaves no task at all.
    expect(uuids.length + finished.length).toBeLessThanOrEqual(RUNS)
    expect(uuids.length + finished.length).toBe(RUNS)

    let readable = 0
    let blobbed = 0
    // Killed at any instant, no message refers to a blob that is not there.
    expect(danglingBlobs(tree.base)).toEqual([])
    const started: string[] = []
    for (const uuid of uuids) {
      const dir = tree.layout.taskDir('running', uuid)
      const messages = completeLines(join(dir, 'messages.jsonl'))
      for (const name of ['current.jsonl', 'tools.jsonl', 'summaries.jsonl', 'planning.jsonl', 'inbox.jsonl']) completeLines(join(dir, name))
      // Killed while the task was being created, metadata.json or state.json may not exist yet; what exists parses.
      for (const name of ['metadata.json', 'state.json']) if (existsSync(join(dir, name))) JSON.parse(readFileSync(join(dir, name), 'utf8'))
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, i) => i + 1))
      if (messages.length >= 2) started.push(uuid)
      if (existsSync(join(dir, 'blobs'))) blobbed++
      readable++
    }

    await sleep(1_300)
    // Half of the tasks that had started are resumed (each takes its dead owner's lock over); the rest are left for the reaper.
    const resumed = started.filter((_, i) => i % 2 === 0)
    const before = fake.requests.length
    const outcomes: Awaited<ReturnType<typeof cliAsync>>[] = []
    for (let i = 0; i < resumed.length; i += AT_ONCE * 2)
      outcomes.push(...(await Promise.all(resumed.slice(i, i + AT_ONCE * 2).map((uuid) => cliAsync(['run', '--resume', uuid, ...common])))))
    const completedOk = outcomes.filter((o) => o.code === 0).length
    for (const r of fake.requests.slice(before)) if (Array.isArray(r.body.tools)) expectWellFormed(r)

    const reaped = await cliAsync(['watch-locks', '--once', '--json', ...common])
    expect(reaped.code, reaped.stderr).toBe(0)
    const findings = findingsText(reaped.stdout)
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { uuid: string; action: string })
    // reaped: paused to be resumed (fleet.recovery: resume), the dead pid recorded; finished: it had settled and only the move was left.
    const reapedIds = findings.filter((f) => f.action === 'reaped' || f.action === 'finished').map((f) => f.uuid)
    const leftForReaper = uuids.filter((uuid) => !resumed.includes(uuid))
    const missed = leftForReaper.filter((uuid) => !reapedIds.includes(uuid))
    const explain = missed.map((uuid) => {
      const dir = tree.layout.taskDir('running', uuid)
      const read = (name: string) => (existsSync(join(dir, name)) ? readFileSync(join(dir, name), 'utf8').slice(0, 300) : '-')
      return `${uuid}: files ${existsSync(dir) ? readdirSync(dir).join(',') : 'gone'}; lock ${read('.lock')}; state ${read('state.json')}`
    })
    expect(explain, reaped.stderr).toEqual([])
    expect([...reapedIds].sort()).toEqual([...leftForReaper].sort())
    // A second pass finds nothing: each was reaped exactly once.
    const again = await cliAsync(['watch-locks', '--once', '--json', ...common])
    expect(findingsText(again.stdout).trim()).toBe('')
    expect(readdirSync(tree.layout.dir('running'))).toEqual([])

    // tasks.db says what the directories say.
    const db = new Database(tree.layout.db, { readonly: true })
    const rows = db.prepare('SELECT uuid, location, status FROM tasks ORDER BY uuid').all() as { uuid: string; location: string; status: string }[]
    db.close()
    // fleet.recovery's default (resume) pauses a reaped task to be resumed (docs/running.md#recovery-on-one-host).
    const dirs = (['completed', 'paused'] as const)
      .flatMap((location) =>
        readdirSync(tree.layout.dir(location)).map((uuid) => ({
          uuid,
          location,
          status: (JSON.parse(readFileSync(join(tree.layout.taskDir(location, uuid), 'state.json'), 'utf8')) as { status: string }).status,
        })),
      )
      .sort((a, b) => (a.uuid < b.uuid ? -1 : 1))
    expect(rows).toEqual(dirs)
    for (const uuid of resumed) expect(dirs.find((d) => d.uuid === uuid)?.status).toBe('completed')
    const pausedByReaper = findings.filter((f) => f.action === 'reaped').map((f) => ({ uuid: f.uuid, location: 'paused', status: 'paused' }))
    expect(dirs.filter((d) => d.location === 'paused')).toEqual(pausedByReaper.sort((a, b) => (a.uuid < b.uuid ? -1 : 1)))
    // No litter: temp files of locks or writes, anywhere in the tree; no lock outside running/.
    expect(litter(tree.base)).toEqual([])
    expect(strayLocks(tree.base)).toEqual([])
    expect(danglingBlobs(tree.base)).toEqual([])
    record('kill-run', {
      runs: RUNS,
      killed_mid_work: uuids.length,
      readable,
      with_blobs: blobbed,
      resumed: resumed.length,
      resumed_completed: completedOk,
      reaped: reapedIds.length,
      reaped_expected: leftForReaper.length,
    })
    expect(completedOk).toBe(resumed.length)
    rmSync(ws, { recursive: true, force: true })
  })
})
