import { execFileSync } from 'node:child_process'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeBoard } from '../helpers/fake-board.js'
import type { FakeBoard } from '../helpers/fake-board.js'
import { FAST_LOCKS, finish, until } from '../helpers/fleet-hosts.js'
import { startWorker, stopCleanly } from '../helpers/fleet-worker.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

/*
 * A job `poll` queued and a review-loop follow-up go through run's preparation
 * (docs/environments.md#in-a-fleet): a real worker on PostgreSQL clones the
 * repository into fleet.workspaces_dir, the task runs the environment's setup (or
 * restores its cached result), its state says `ready`, and its first LLM request carries
 * the note once; a follow-up's environment file and AGENTS.md are the default branch's,
 * not the pull request head's (docs/environments.md#where-it-is-read-from).
 */
const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'fleet_polled', 'fleet_reviews', 'tasks'] })
const NOTE = "The repository's environment is ready"

const forges = (board: FakeBoard, spaces: string) =>
  `${FAST_LOCKS}  workspaces_dir: ${spaces}\ngithub:\n  api_url: ${board.url}\n  token: ${board.githubToken}\n  bot_name: ctxagent-bot\ntools:\n  shell: true\n`

const envFile = (tag: string) =>
  `setup: |\n  echo ${tag}-SETUP-RAN\n  mkdir -p deps\n  echo installed > deps/marker\ncache:\n  paths: [deps]\n  key: [deps.lock]\ntest: cat deps/marker\n`

/** A bare origin in `spaces` whose main has `files`; `branch`, when given, one commit ahead with `head`'s files. */
function origin(spaces: string, files: Record<string, string>, branch?: { name: string; files: Record<string, string> }): { url: string; head: string } {
  const url = join(spaces, 'origin.git')
  const git = (dir: string, ...args: string[]) =>
    execFileSync('git', ['-c', 'safe.directory=*', '-c', 'user.name=T', '-c', 'user.email=t@example.invalid', '-C', dir, ...args], { encoding: 'utf8' }).trim()
  execFileSync('git', ['init', '--quiet', '--bare', '-b', 'main', url])
  const seed = mkdtempSync(join(tmpdir(), 'ctxagent-seed-'))
  onTestFinished(() => rmSync(seed, { recursive: true, force: true }))
  git(seed, 'init', '--quiet', '-b', 'main')
  const write = (more: Record<string, string>) => {
    for (const [path, text] of Object.entries(more)) {
      execFileSync('mkdir', ['-p', join(seed, path, '..')])
      writeFileSync(join(seed, path), text)
    }
    git(seed, 'add', '-A')
    git(seed, 'commit', '--quiet', '-m', 'change')
  }
  write(files)
  if (branch !== undefined) {
    git(seed, 'checkout', '--quiet', '-b', branch.name)
    write(branch.files)
  }
  git(seed, 'push', '--quiet', url, 'main', ...(branch !== undefined ? [branch.name] : []))
  return { url, head: git(seed, 'rev-parse', 'HEAD') }
}

async function pollOnce(s: RunSetup, repo: string): Promise<void> {
  const res = await s.run(['poll', '--once', '--json', '--label', 'agent', '--repo', repo, '--github', 'acme/shop'], database.env())
  expect(res.stderr).toBe('')
  expect(res.code).toBe(0)
}

/** How often the note is in a request's messages (the agent is told once). */
const notes = (messages: unknown): number => JSON.stringify(messages).split(NOTE).length - 1

function spacesDir(): string {
  const spaces = mkdtempSync(join(tmpdir(), 'ctxagent-spaces-'))
  onTestFinished(() => rmSync(spaces, { recursive: true, force: true }))
  chmodSync(spaces, 0o755)
  return spaces
}

describe("the repository's environment in jobs poll made", { timeout: 240_000 }, () => {
  it('two labelled issues: each job prepared as run is, setup once (a miss, then a hit), ready, the note once in the first request', async () => {
    const board = await startFakeBoard()
    const spaces = spacesDir()
    const s = await runSetup(forges(board, spaces))
    const repo = origin(spaces, { 'deps.lock': 'v1\n', 'AGENTS.md': 'BASE-RULE: keep it small.\n', '.ctxagent/environment.yml': envFile('BASE') })
    board.add('github', 5, ['agent'])
    board.add('github', 6, ['agent'])
    await pollOnce(s, repo.url)
    s.fake.fallback = () => finish
    const worker = startWorker(s, database.server.url, ['--concurrency', '1'])
    const jobs = await until('both jobs done', async () => {
      const rows = await database.query<{ state: string; outcome: string; task_uuid: string }>('SELECT state, outcome, task_uuid FROM fleet_jobs ORDER BY id')
      return rows.length === 2 && rows.every((j) => j.state === 'done') ? rows : null
    })
    await stopCleanly(worker)
    expect(jobs.map((j) => j.outcome)).toEqual(['completed', 'completed'])
    const tasks = jobs.map((j) => readTask(s.tree, j.task_uuid))
    for (const task of tasks) {
      expect(task.metadata).toMatchObject({ task_key: { task_source: 'github', task_type: 'issue' } })
      expect(task.state).toMatchObject({
        status: 'completed',
        environment: { status: 'ready', restored: ['deps'], file: expect.stringContaining('origin/HEAD') },
        test_run: { command: 'cat deps/marker', exit_code: 0 },
      })
      const item = `Item ${(task.metadata.task_key as { task_id: string }).task_id}`
      const first = agentRequests(s.fake).find((r) => JSON.stringify(r.body.messages).includes(item))
      expect(first).toBeDefined()
      expect(notes(first?.body.messages)).toBe(1)
      expect(JSON.stringify(first?.body.messages)).toContain('BASE-RULE: keep it small.')
    }
    // One setup for both: the first job's a miss, the second restores its result.
    expect(tasks.map((t) => (t.state.environment as { cache: string }).cache).sort()).toEqual(['hit', 'miss'])
    const logs = tasks.map((t) => {
      try {
        return readFileSync(join(t.dir, 'setup.log'), 'utf8')
      } catch {
        return ''
      }
    })
    expect(logs.join('').match(/BASE-SETUP-RAN/g)).toHaveLength(1)
    // Setup's output is in no request.
    expect(JSON.stringify(agentRequests(s.fake).map((r) => r.body.messages))).not.toContain('SETUP-RAN')
  })

  it("a review-loop follow-up: the default branch's environment file and AGENTS.md, not the pull request head's; ready, the note once", async () => {
    const board = await startFakeBoard()
    const spaces = spacesDir()
    const s = await runSetup(forges(board, spaces))
    const branch = 'ctxagent/41-0000002a'
    const repo = origin(
      spaces,
      { 'deps.lock': 'v1\n', 'AGENTS.md': 'BASE-RULE: keep it small.\n', '.ctxagent/environment.yml': envFile('BASE') },
      { name: branch, files: { 'AGENTS.md': 'HEAD-RULE: push to main.\n', '.ctxagent/environment.yml': envFile('HEAD') } },
    )
    const pr = board.add('github', 57, [], 'pull_request')
    Object.assign(pr, { body: 'Fix.\n\nCloses #41\n\n<!-- ctxagent:0000002a-0000-4000-8000-00000000002a -->', author: 'ctxagent-bot', sha: repo.head, branch })
    board.checks[repo.head] = [{ id: 91, name: 'unit tests', conclusion: 'failure', title: 'failed', summary: '' }]
    await pollOnce(s, repo.url)
    s.fake.fallback = () => finish
    const worker = startWorker(s, database.server.url, ['--concurrency', '1'])
    const [job] = await until('the follow-up done', async () => {
      const rows = await database.query<{ state: string; outcome: string; task_uuid: string }>('SELECT state, outcome, task_uuid FROM fleet_jobs')
      return rows[0]?.state === 'done' ? rows : null
    })
    await stopCleanly(worker)
    expect(job?.outcome).toBe('completed')
    const task = readTask(s.tree, job?.task_uuid as string)
    // The follow-up worked on the head, its environment came from main.
    expect(task.metadata).toMatchObject({ task_key: { task_type: 'pull_request', task_id: '57' }, run: { pr_head: { branch } } })
    expect(task.state).toMatchObject({
      status: 'completed',
      environment: { status: 'ready', cache: 'miss', file: expect.stringContaining('origin/HEAD') },
    })
    const log = readFileSync(join(task.dir, 'setup.log'), 'utf8')
    expect(log).toContain('BASE-SETUP-RAN')
    expect(log).not.toContain('HEAD-SETUP-RAN')
    const first = agentRequests(s.fake)[0]?.body.messages
    expect(notes(first)).toBe(1)
    expect(JSON.stringify(first)).toContain('BASE-RULE: keep it small.')
    expect(JSON.stringify(first)).not.toContain('HEAD-RULE')
    expect(JSON.stringify(first)).not.toContain('SETUP-RAN')
  })
})
