import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { exitOf } from '../helpers/wait.js'
import { finish, until } from '../helpers/fleet-hosts.js'
import { startWorker } from '../helpers/fleet-worker.js'
import { startGitHttp } from '../helpers/git-http.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { fleetJobs } from '../helpers/fleet-jobs.js'
import { readTask, runSetup } from '../run/harness.js'

/**
 * What a fleet takes from outside is untrusted (docs/contract.md §8, §14.4): `--repo` sources (cloned
 * as copies, never with credentials in the URL or the clone), refs (never an option),
 * job rows written by hand (validated before anything is run), text PostgreSQL cannot hold.
 */
const database = usePostgres({ schema: true, truncate: ['fleet_jobs', 'fleet_workers', 'tasks'] })
const query = database.query
const db = database.env

const jobCount = async () => (await query<{ n: number }>('SELECT count(*)::int AS n FROM fleet_jobs'))[0]?.n

function tempRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'ctxagent-repo-'))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  return root
}

function git(args: string[], cwd: string): string {
  return execFileSync('git', args, {
    cwd,
    env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  }).toString()
}

/** A repository at `dir` with two commits (calc.js v1, tagged v1 and branch feature; then v2 on main), objects loose and packed. */
function makeRepo(dir: string): void {
  mkdirSync(dir, { recursive: true })
  git(['init', '--quiet', '-b', 'main'], dir)
  writeFileSync(join(dir, 'calc.js'), 'v1\n')
  git(['add', '.'], dir)
  git(['commit', '--quiet', '-m', 'v1'], dir)
  git(['tag', 'v1'], dir)
  git(['branch', 'feature'], dir)
  git(['gc', '--quiet'], dir)
  writeFileSync(join(dir, 'calc.js'), 'v2\n')
  git(['commit', '--quiet', '-am', 'v2'], dir)
}

/** Every file under `dir`, relative path → sha256 of its bytes. */
function hashes(dir: string): Map<string, string> {
  const out = new Map<string, string>()
  const walk = (d: string): void => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, entry.name)
      if (entry.isDirectory()) walk(p)
      else if (entry.isFile()) out.set(p.slice(dir.length), createHash('sha256').update(readFileSync(p)).digest('hex'))
    }
  }
  walk(dir)
  return out
}

function files(dir: string): string[] {
  return [...hashes(dir).keys()].map((p) => join(dir, p))
}

async function doneJobs(n: number): Promise<void> {
  await until(
    `${n} job(s) finished`,
    async () => (await query<{ n: number }>(`SELECT count(*)::int AS n FROM fleet_jobs WHERE state IN ('done', 'failed', 'cancelled')`))[0]?.n === n,
  )
}

async function stop(worker: ReturnType<typeof startWorker>): Promise<void> {
  worker.child.kill('SIGTERM')
  expect((await exitOf(worker.child)).code).toBe(0)
}

describe('--repo sources', () => {
  it('a local repository is cloned as a copy: writing into the clone’s .git/objects leaves the source intact (fsck, same bytes)', async () => {
    const root = tempRoot()
    const source = join(root, 'src')
    makeRepo(source)
    const objects = join(source, '.git', 'objects')
    const before = hashes(objects)
    const workspaces = join(root, 'workspaces')
    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    s.fake.fallback = () => finish
    const worker = startWorker(s, database.server.url)
    await until('the worker to start', async () => worker.err().includes('started on'))
    const res = await s.run(['enqueue', '--task', 'read calc.js', '--repo', `${source}#feature`], db())
    expect(res.code, res.stderr).toBe(0)
    const uuid = res.stdout.trim()
    await doneJobs(1)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    const clone = join(workspaces, uuid)
    expect(readFileSync(join(clone, 'calc.js'), 'utf8')).toBe('v1\n')
    // As root, the clone is handed to the unprivileged user its commands run as (nobody here), every file of it.
    if (process.getuid?.() === 0) for (const f of [clone, join(clone, 'calc.js'), ...files(join(clone, '.git'))]) expect(statSync(f).uid, f).not.toBe(0)
    // No object file of the clone is the source's (a hard link), and no alternates point there.
    const sourceInodes = new Set(files(objects).map((f) => statSync(f).ino))
    const cloneObjects = files(join(clone, '.git', 'objects'))
    expect(cloneObjects.length).toBeGreaterThan(0)
    for (const f of cloneObjects) expect(sourceInodes.has(statSync(f).ino), f).toBe(false)
    expect(existsSync(join(clone, '.git', 'objects', 'info', 'alternates'))).toBe(false)
    // What a task's command could do in its clone: append to every object file.
    for (const f of cloneObjects) appendFileSync(f, 'garbage')
    expect(hashes(objects)).toEqual(before)
    git(['fsck', '--full', '--strict'], source)
    await stop(worker)
  })

  it('refuses a URL holding a user or password (exit 2, the token never echoed, nothing queued); a configured token reaches git at clone time only, never the clone', async () => {
    const root = tempRoot()
    makeRepo(join(root, 'work'))
    const served = join(root, 'served')
    mkdirSync(served)
    git(['clone', '--quiet', '--bare', join(root, 'work'), join(served, 'calc.git')], root)
    const token = 'glpat-SeCrEtToKeN1234567890'
    const http = await startGitHttp(served, 'oauth2', token)
    const workspaces = join(root, 'workspaces')

    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    for (const url of [
      `${http.url.replace('//', `//oauth2:${token}@`)}/calc.git`,
      `${http.url.replace('//', `//${token}@`)}/calc.git#main`,
      `https://x:${token}@example.com/a b`,
      `x:${token}@example.com:a.git`,
    ]) {
      const res = await s.run(['enqueue', '--task', 'x', '--repo', url], db())
      expect(res.code, res.stderr).toBe(2)
      expect(res.stderr).not.toContain(token)
      expect(res.stderr.split('\n')).toHaveLength(2)
    }
    expect((await s.run(['enqueue', '--task', 'x', '--repo', `${http.url.replace('//', `//oauth2:${token}@`)}/calc.git`], db())).stderr).toMatch(
      /^ctxagent: --repo: the URL of http:\/\/….*@127\.0\.0\.1:\d+\/calc\.git holds a user name or password \(give it without them/,
    )
    // ssh keeps its user name (the key authenticates); a password there is refused too.
    expect((await s.run(['enqueue', '--task', 'x', '--repo', `ssh://git:${token}@example.com/a.git`], db())).code).toBe(2)
    expect(await jobCount()).toBe(0)

    // Without a token for its host, the clone fails (401) and says so.
    writeFileSync(s.config, s.fake.configYaml(`fleet:\n  workspaces_dir: ${workspaces}\n`))
    s.fake.fallback = () => finish
    const noToken = startWorker(s, database.server.url)
    await until('the worker to start', async () => noToken.err().includes('started on'))
    const denied = (await s.run(['enqueue', '--task', 'x', '--repo', `${http.url}/calc.git`], db())).stdout.trim()
    await doneJobs(1)
    expect((await query<{ outcome: string; error: string }>('SELECT outcome, error FROM fleet_jobs WHERE task_uuid = $1', [denied]))[0]).toMatchObject({
      outcome: 'failed',
      error: expect.stringMatching(/^the repository was not cloned: /),
    })
    await stop(noToken)

    // gitlab.token for gitlab.url's host: the clone authenticates with it, and nothing of it stays in the clone.
    writeFileSync(s.config, s.fake.configYaml(`fleet:\n  workspaces_dir: ${workspaces}\ngitlab:\n  url: ${http.url}\n  token: ${token}\n`))
    const worker = startWorker(s, database.server.url)
    await until('the worker to start', async () => worker.err().includes('started on'))
    const res = await s.run(['enqueue', '--task', 'read calc.js', '--repo', `${http.url}/calc.git#v1`], db())
    expect(res.code, res.stderr).toBe(0)
    const uuid = res.stdout.trim()
    await doneJobs(2)
    expect(readTask(s.tree, uuid)).toMatchObject({ location: 'completed', state: { status: 'completed' } })
    const clone = join(workspaces, uuid)
    expect(readFileSync(join(clone, 'calc.js'), 'utf8')).toBe('v1\n')
    expect(http.auth).toContain(`Basic ${Buffer.from(`oauth2:${token}`).toString('base64')}`)
    for (const [path, hash] of hashes(join(clone, '.git'))) {
      const text = readFileSync(join(clone, '.git', path), 'latin1')
      expect(text.includes(token), `${path} ${hash}`).toBe(false)
    }
    const config = readFileSync(join(clone, '.git', 'config'), 'utf8')
    expect(config).not.toMatch(/extraheader|credential|askpass|oauth2/i)
    expect(config).toContain(`url = ${http.url}/calc.git`)
    for (const request of s.fake.requests) expect(request.raw.toString()).not.toContain(token)
    await stop(worker)
  })
})

describe('refs and job rows', () => {
  it('a ref starting with - is refused at enqueue (exit 2, nothing queued); job rows written by hand are validated, failed with the reason, and nothing is cloned or run', async () => {
    const root = tempRoot()
    const source = join(root, 'src')
    makeRepo(source)
    const workspaces = join(root, 'deep', 'workspaces')
    mkdirSync(join(root, 'deep'))
    const s = await runSetup(`fleet:\n  workspaces_dir: ${workspaces}\n`)
    s.fake.fallback = () => finish
    for (const ref of ['-f', '--merge', 'a..b']) {
      const res = await s.run(['enqueue', '--task', 'x', '--repo', `${source}#${ref}`], db())
      expect(res.code, res.stderr).toBe(2)
      expect(res.stderr).toMatch(/^ctxagent: --repo's ref '.*' is not a branch, tag or commit name \(/)
    }
    expect(await jobCount()).toBe(0)

    // Rows as a hostile or careless hand would write them.
    const good = { task: 'read calc.js', repo: source }
    const rows: [string, string, object][] = [
      ['../../x', 'new', good],
      ['00000000-0000-4000-8000-000000000001', 'new', { ...good, ref: '-f' }],
      ['00000000-0000-4000-8000-000000000002', 'new', { ...good, ref: '--merge' }],
      ['00000000-0000-4000-8000-000000000003', 'bogus', good],
      ['00000000-0000-4000-8000-000000000004', 'new', { ...good, max_turns: -1 }],
      ['00000000-0000-4000-8000-000000000005', 'new', { task: 'x', workspace: 'relative/dir' }],
      ['00000000-0000-4000-8000-000000000006', 'new', { task: 'x', repo: '--upload-pack=touch /tmp/pwned' }],
      ['00000000-0000-4000-8000-000000000007', 'new', { github: '--help' }],
      ['00000000-0000-4000-8000-000000000008', 'new', { task: 'x', user: '-x\n' }],
    ]
    for (const [uuid, kind, spec] of rows) await query('INSERT INTO fleet_jobs (task_uuid, kind, spec) VALUES ($1, $2, $3)', [uuid, kind, JSON.stringify(spec)])
    const worker = startWorker(s, database.server.url)
    await doneJobs(rows.length)
    const ended = await fleetJobs(database)
    const reasons = [
      'task_uuid "../../x" is not a UUID',
      'spec.ref "-f"',
      'spec.ref "--merge"',
      'kind "bogus"',
      'spec.max_turns',
      'spec.workspace is not an absolute path',
      "spec.repo: '--upload-pack",
      'spec.github is not owner/repo#N',
      'spec.user',
    ]
    ended.forEach((row, i) => {
      expect(row.outcome).toBe('failed')
      expect(row.error).toContain(`the job's row is not valid: ${reasons[i]}`)
    })
    // Nothing was cloned, inside fleet.workspaces_dir or out of it, and no task was run.
    expect(existsSync(workspaces)).toBe(false)
    expect(readdirSync(join(root, 'deep'))).toEqual([])
    expect(existsSync(join(root, 'x'))).toBe(false)
    expect(s.fake.requests).toEqual([])
    expect(s.tree.layout.list('running').concat(s.tree.layout.list('paused'), s.tree.layout.list('completed'))).toEqual([])
    await stop(worker)
  })

  it('a task holding a NUL byte is a usage error naming it and where it is (exit 2), and nothing is queued', async () => {
    const s = await runSetup()
    const file = join(s.ws, '..', 'task-with-nul.txt')
    writeFileSync(file, 'fix the bug\0 now')
    const res = await s.run(['enqueue', '--task-file', file, '--workspace', s.ws], db())
    expect(res).toMatchObject({
      code: 2,
      stderr:
        "ctxagent: the task file holds a NUL byte (\\0) at character 12, which the fleet's database cannot store (remove it: a binary file is not a task)\n",
    })
    expect(await jobCount()).toBe(0)
  })
})
