import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeBoard } from '../helpers/fake-board.js'
import type { FakeBoard } from '../helpers/fake-board.js'
import { canKillServer } from '../helpers/postgres.js'
import { usePostgres } from '../helpers/use-postgres.js'
import { exitOf, until } from '../helpers/wait.js'
import { pollOnce as pollWith, startWorker } from '../helpers/fleet-worker.js'
import { readTask, runSetup } from '../run/harness.js'
import type { RunSetup } from '../run/harness.js'

const database = usePostgres({ truncate: ['fleet_jobs', 'fleet_workers', 'fleet_polled', 'tasks'] })
const query = database.query
const db = database.env

const forges = (board: FakeBoard) =>
  `github:\n  api_url: ${board.url}\n  token: ${board.githubToken}\n  bot_name: ctxagent-bot\ngitlab:\n  url: ${board.url}\n  token: ${board.gitlabToken}\n  bot_name: ctxagent-bot\ncomments:\n  min_interval_seconds: 0.01\n`

interface Report {
  source: string
  listed: number
  queued: string[]
  resumed: string[]
  cancelled: string[]
  labelled: { ref: string; label: string | null }[]
  errors: string[]
}

/** One poll pass (test/helpers/fleet-worker.ts), its report lines. */
const pollOnce = (s: RunSetup, args: string[]) => pollWith<Report>(s, database, args)

// Each test starts 10-20 processes one after another (poll passes, a worker, its agents): on a loaded machine more than the 60 s default; a give-up point, not a margin.
describe('ctxagent poll', { timeout: 240_000 }, () => {
  it('two pollers at once make one job per labelled open issue or pull request, and the labels follow each task: processing, done, failed; a finished one runs again when its label comes off', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('github', 1, ['agent'])
    board.add('github', 2, ['agent', 'bug'], 'pull_request')
    board.add('github', 3, ['bug'])
    board.add('github', 4, ['agent']).open = false
    const [a, b] = await Promise.all([pollOnce(s, ['--github', 'acme/shop', '--max-turns', '2']), pollOnce(s, ['--github', 'acme/shop', '--max-turns', '2'])])
    expect([...(a[0]?.queued ?? []), ...(b[0]?.queued ?? [])].sort()).toEqual(['acme/shop#1', 'acme/shop#2'])
    expect(a[0]).toMatchObject({ source: 'github:acme/shop', listed: 2, errors: [] })
    const jobs = await query<{ ref: string; kind: string; state: string; max_turns: number }>(
      `SELECT spec->>'github' AS ref, kind, state, (spec->>'max_turns')::int AS max_turns FROM fleet_jobs ORDER BY ref`,
    )
    expect(jobs).toEqual([
      { ref: 'acme/shop#1', kind: 'new', state: 'waiting', max_turns: 2 },
      { ref: 'acme/shop#2', kind: 'new', state: 'waiting', max_turns: 2 },
    ])
    expect(board.github.map((i) => i.labels)).toEqual([['agent', 'ctxagent:processing'], ['agent', 'bug', 'ctxagent:processing'], ['bug'], ['agent']])
    // Polling again, however often, queues nothing more.
    expect(await pollOnce(s, ['--github', 'acme/shop'])).toMatchObject([{ listed: 2, queued: [], labelled: [] }])

    // #1 finishes; #2 uses up its two turns (timeout): done and failed.
    let n = 0
    s.fake.fallback = (req) =>
      JSON.stringify(req.body.messages).includes('Item 1')
        ? { calls: [{ name: 'finish', arguments: { summary: 'fixed', status: 'done' } }] }
        : { calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] }
    const worker = startWorker(s, database.server.url, ['--concurrency', '2'])
    await until('both jobs done', async () => (await query<{ state: string }>('SELECT state FROM fleet_jobs')).every((j) => j.state === 'done'))
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
    const [after] = await pollOnce(s, ['--github', 'acme/shop'])
    expect(after?.labelled.sort((x, y) => x.ref.localeCompare(y.ref))).toEqual([
      { ref: 'acme/shop#1', label: 'ctxagent:done' },
      { ref: 'acme/shop#2', label: 'ctxagent:failed' },
    ])
    expect(board.github[0]?.labels).toEqual(['agent', 'ctxagent:done'])
    expect(board.github[1]?.labels).toEqual(['agent', 'bug', 'ctxagent:failed'])
    const [first] = await query<{ task_uuid: string }>(`SELECT task_uuid FROM fleet_polled WHERE ref = 'acme/shop#1'`)
    expect(readTask(s.tree, first?.task_uuid as string)).toMatchObject({
      location: 'completed',
      metadata: { task_key: { task_source: 'github', task_id: '1' } },
    })
    // #2 is a pull request (GitHub lists it among the issues): its task read it as one.
    const [pr] = await query<{ task_uuid: string }>(`SELECT task_uuid FROM fleet_polled WHERE ref = 'acme/shop#2'`)
    const prTask = readTask(s.tree, pr?.task_uuid as string)
    expect(prTask.metadata).toMatchObject({ task_key: { task_source: 'github', task_type: 'pull_request', task_id: '2' } })
    expect(JSON.stringify(prTask.messages.find((m) => m.role === 'user'))).toContain('Pull request acme/shop#2: Item 2')
    expect(board.requests.filter((r) => r.path === '/repos/acme/shop/pulls/2' || r.path === '/graphql').map((r) => r.path)).toEqual([
      '/repos/acme/shop/pulls/2',
      '/graphql',
    ])

    // The done label taken off, the trigger label still on: it runs again, as a new task.
    board.github[0]!.labels = ['agent']
    const [again] = await pollOnce(s, ['--github', 'acme/shop'])
    expect(again).toMatchObject({ queued: ['acme/shop#1'], labelled: [{ ref: 'acme/shop#1', label: 'ctxagent:processing' }] })
    const [second] = await query<{ task_uuid: string }>(`SELECT task_uuid FROM fleet_polled WHERE ref = 'acme/shop#1'`)
    expect(second?.task_uuid).not.toBe(first?.task_uuid)
  })

  it('a waiting job whose issue lost its label or was closed is cancelled; a paused one is resumed when its paused label comes off', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('gitlab', 5, ['agent'])
    board.add('gitlab', 6, ['agent'])
    board.add('gitlab', 7, ['agent'])
    // #7's task looks around until paused: no turn budget to run out of first.
    await pollOnce(s, ['--gitlab', 'acme/backend/api', '--max-turns', '1000000'])
    board.gitlab[0]!.labels = ['ctxagent:processing'] // the trigger label taken off
    board.gitlab[1]!.open = false
    const [gone] = await pollOnce(s, ['--gitlab', 'acme/backend/api'])
    expect(gone?.cancelled.sort()).toEqual(['acme/backend/api#5', 'acme/backend/api#6'])
    expect(gone?.labelled.sort((x, y) => x.ref.localeCompare(y.ref))).toEqual([
      { ref: 'acme/backend/api#5', label: null },
      { ref: 'acme/backend/api#6', label: null },
    ])
    expect(board.gitlab[0]?.labels).toEqual([])
    expect(await query(`SELECT spec->>'gitlab' AS ref, state, outcome FROM fleet_jobs ORDER BY ref`)).toEqual([
      { ref: 'acme/backend/api#5', state: 'cancelled', outcome: 'cancelled' },
      { ref: 'acme/backend/api#6', state: 'cancelled', outcome: 'cancelled' },
      { ref: 'acme/backend/api#7', state: 'waiting', outcome: null },
    ])

    // #7 runs, and an operator pauses it: the paused label; taken off, the task is resumed.
    let n = 0
    s.fake.fallback = () => ({ calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const worker = startWorker(s, database.server.url, ['--concurrency', '2'])
    const [row] = await query<{ task_uuid: string }>(`SELECT task_uuid FROM fleet_polled WHERE ref = 'acme/backend/api#7'`)
    const uuid = row?.task_uuid as string
    await until('the task under way', async () => readTask(s.tree, uuid).messages.length >= 3)
    expect((await s.run(['pause', uuid])).code).toBe(0)
    await until(
      'its job ended paused',
      async () => (await query<{ outcome: string }>(`SELECT outcome FROM fleet_jobs WHERE task_uuid = $1`, [uuid]))[0]?.outcome === 'paused',
    )
    expect((await pollOnce(s, ['--gitlab', 'acme/backend/api']))[0]?.labelled).toEqual([{ ref: 'acme/backend/api#7', label: 'ctxagent:paused' }])
    expect(board.gitlab[2]?.labels).toEqual(['agent', 'ctxagent:paused'])
    s.fake.fallback = () => ({ calls: [{ name: 'finish', arguments: { summary: 'fixed', status: 'done' } }] })
    board.gitlab[2]!.labels = ['agent']
    expect((await pollOnce(s, ['--gitlab', 'acme/backend/api']))[0]).toMatchObject({
      resumed: ['acme/backend/api#7'],
      labelled: [{ ref: 'acme/backend/api#7', label: 'ctxagent:processing' }],
    })
    await until('the resumed task completed', async () => readTask(s.tree, uuid).location === 'completed')
    worker.child.kill('SIGTERM')
    expect((await exitOf(worker.child)).code).toBe(0)
    expect((await pollOnce(s, ['--gitlab', 'acme/backend/api']))[0]?.labelled).toEqual([{ ref: 'acme/backend/api#7', label: 'ctxagent:done' }])
  })

  it("pollers with different labels over one repository leave each other's jobs alone; an item carrying both runs again only by the poller whose label made its job", async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('gitlab', 1, ['agent'])
    board.add('gitlab', 2, ['triage'])
    board.add('gitlab', 3, ['agent', 'triage'])
    const agent = () => pollOnce(s, ['--gitlab', 'acme/backend/api', '--max-turns', '2'])
    const triage = () => pollOnce(s, ['--gitlab', 'acme/backend/api', '--max-turns', '7', '--label', 'triage'])
    expect((await agent())[0]).toMatchObject({ queued: ['acme/backend/api#1', 'acme/backend/api#3'], cancelled: [] })
    // Each sees the other's item as "not labelled" by its own label: that is no reason to cancel it.
    expect((await triage())[0]).toMatchObject({ listed: 2, queued: ['acme/backend/api#2'], cancelled: [] })
    expect((await agent())[0]).toMatchObject({ queued: [], cancelled: [] })
    const jobs = () =>
      query<{ ref: string; state: string; max_turns: number }>(
        `SELECT spec->>'gitlab' AS ref, state, (spec->>'max_turns')::int AS max_turns FROM fleet_jobs ORDER BY id`,
      )
    expect(await jobs()).toEqual([
      { ref: 'acme/backend/api#1', state: 'waiting', max_turns: 2 },
      { ref: 'acme/backend/api#3', state: 'waiting', max_turns: 2 },
      { ref: 'acme/backend/api#2', state: 'waiting', max_turns: 7 },
    ])
    expect(await query(`SELECT ref, trigger FROM fleet_polled ORDER BY ref`)).toEqual([
      { ref: 'acme/backend/api#1', trigger: 'agent' },
      { ref: 'acme/backend/api#2', trigger: 'triage' },
      { ref: 'acme/backend/api#3', trigger: 'agent' },
    ])
    // #3 is done, and its done label taken off: the poller of its own label runs it again, with its own flags.
    await query(`UPDATE fleet_jobs SET state = 'done', outcome = 'completed', finished_at = now() WHERE spec->>'gitlab' = 'acme/backend/api#3'`)
    expect((await agent())[0]?.labelled).toEqual([{ ref: 'acme/backend/api#3', label: 'ctxagent:done' }])
    board.gitlab[2]!.labels = ['agent', 'triage']
    // A row from before the trigger column is taken over by the first poller that lists its item.
    await query(`UPDATE fleet_polled SET trigger = NULL WHERE ref = 'acme/backend/api#1'`)
    expect((await triage())[0]).toMatchObject({ queued: [], cancelled: [] })
    expect((await agent())[0]).toMatchObject({ queued: ['acme/backend/api#3'], cancelled: [] })
    expect((await jobs()).slice(3)).toEqual([{ ref: 'acme/backend/api#3', state: 'waiting', max_turns: 2 }])
    expect(await query(`SELECT trigger FROM fleet_polled WHERE ref = 'acme/backend/api#1'`)).toEqual([{ trigger: 'agent' }])
  })

  it('a listing taken before a person changed an item: its job is cancelled, run again or resumed only if the item, read again, still says so', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    const [one, two, three] = [board.add('gitlab', 1, ['agent']), board.add('gitlab', 2, ['agent'], 'merge_request'), board.add('gitlab', 3, ['agent'])]
    const poll = async () => (await pollOnce(s, ['--gitlab', 'acme/backend/api']))[0]
    await poll()
    const uuid = async (ref: string) => (await query<{ task_uuid: string }>(`SELECT task_uuid FROM fleet_polled WHERE ref = $1`, [ref]))[0]?.task_uuid as string
    // !2 done, #3 paused (its task in paused/): their labels follow.
    await query(`UPDATE fleet_jobs SET state = 'done', outcome = 'completed', finished_at = now() WHERE spec->>'gitlab' = 'acme/backend/api!2'`)
    await query(`UPDATE fleet_jobs SET state = 'done', outcome = 'paused', finished_at = now() WHERE spec->>'gitlab' = 'acme/backend/api#3'`)
    mkdirSync(join(s.tree.base, 'paused', await uuid('acme/backend/api#3')), { recursive: true })
    expect((await poll())?.labelled.map((l) => l.label).sort()).toEqual(['ctxagent:done', 'ctxagent:paused'])
    // Now the listing says: #1 lost its label, !2's done label and #3's paused label were taken off...
    one.labels = ['ctxagent:processing']
    two.labels = ['agent']
    three.labels = ['agent']
    // ...and right after it was sent, people changed their minds: #1 labelled again, !2 closed, #3's trigger label taken off.
    board.onAnswered = (r) => {
      if (r.method !== 'GET' || !r.path.startsWith('/api/v4/projects/acme%2Fbackend%2Fapi/merge_requests?')) return
      one.labels = ['agent', 'ctxagent:processing']
      two.open = false
      three.labels = []
      board.onAnswered = null
    }
    const requests = board.requests.length
    expect(await poll()).toMatchObject({ listed: 2, queued: [], resumed: [], cancelled: [] })
    expect(await query(`SELECT spec->>'gitlab' AS ref, kind, state, outcome FROM fleet_jobs ORDER BY ref`)).toEqual([
      { ref: 'acme/backend/api!2', kind: 'new', state: 'done', outcome: 'completed' },
      { ref: 'acme/backend/api#1', kind: 'new', state: 'waiting', outcome: null },
      { ref: 'acme/backend/api#3', kind: 'new', state: 'done', outcome: 'paused' },
    ])
    // One GET of each item, right before it would have been acted on.
    const reads = board.requests.slice(requests).filter((r) => r.method === 'GET' && /\/(issues|merge_requests)\/\d+$/.test(r.path))
    expect(reads.map((r) => r.path.replace('/api/v4/projects/acme%2Fbackend%2Fapi', '')).sort()).toEqual(['/issues/1', '/issues/3', '/merge_requests/2'])
  })

  it('GitLab issues and merge requests; a secondary rate limit on GitHub is waited out, a 429 on GitLab retried, by the clients', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('gitlab', 7, ['agent'])
    board.add('gitlab', 12, ['agent'], 'merge_request')
    board.add('gitlab', 8, ['other'])
    board.add('github', 9, ['agent'])
    board.failures.push({
      method: 'GET',
      path: '/repos/acme/shop/issues',
      status: 403,
      headers: { 'retry-after': '1' },
      message: 'You have exceeded a secondary rate limit. Please wait a few minutes before you try again.',
    })
    board.failures.push({
      method: 'GET',
      path: '/api/v4/projects/acme%2Fbackend%2Fapi/issues',
      status: 429,
      headers: { 'retry-after': '1' },
      message: '429 Too Many Requests',
    })
    const reports = await pollOnce(s, ['--gitlab', 'acme/backend/api', '--github', 'acme/shop'])
    expect(reports.map((r) => [r.source, r.queued.sort(), r.errors])).toEqual([
      ['github:acme/shop', ['acme/shop#9'], []],
      ['gitlab:acme/backend/api', ['acme/backend/api!12', 'acme/backend/api#7'], []],
    ])
    expect(board.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/repos/acme/shop/issues?'))).toHaveLength(2)
    expect(board.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/api/v4/projects/acme%2Fbackend%2Fapi/issues?'))).toHaveLength(2)
    expect(board.gitlab.map((i) => i.labels)).toEqual([['agent', 'ctxagent:processing'], ['agent', 'ctxagent:processing'], ['other']])
    const specs = await query<{ spec: Record<string, unknown> }>(`SELECT spec FROM fleet_jobs WHERE spec ? 'gitlab' ORDER BY id`)
    expect(specs.map((r) => r.spec.gitlab).sort()).toEqual(['acme/backend/api!12', 'acme/backend/api#7'])
  })

  it('more than 100 labelled items (paged), a label with spaces and a colon, status labels with them too', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(`${forges(board)}poll:\n  labels:\n    processing: 'agent: working on it'\n    done: 'agent: done'\n`)
    const trigger = 'needs agent: yes'
    // 130 on GitHub, 103 issues and a merge request on GitLab; all but a few already done.
    for (let n = 1; n <= 130; n++) board.add('github', n, n === 1 || n === 130 ? [trigger] : [trigger, 'agent: done'], n === 130 ? 'pull_request' : 'issue')
    for (let n = 1; n <= 103; n++) board.add('gitlab', n, n === 1 || n === 103 ? [trigger] : [trigger, 'agent: done'])
    board.add('gitlab', 7, [trigger], 'merge_request')
    const poll = async () => pollOnce(s, ['--github', 'acme/shop', '--gitlab', 'acme/backend/api', '--label', trigger])
    const reports = await poll()
    expect(reports.map((r) => [r.source, r.listed, r.queued.sort(), r.errors])).toEqual([
      ['github:acme/shop', 130, ['acme/shop#1', 'acme/shop#130'], []],
      ['gitlab:acme/backend/api', 104, ['acme/backend/api!7', 'acme/backend/api#1', 'acme/backend/api#103'], []],
    ])
    // The listings by label (the review loop's listing of open merge requests, unlabelled, is another's).
    const lists = board.requests
      .filter((r) => r.method === 'GET' && /\/(issues|merge_requests)\?(?=.*labels=)/.test(r.path))
      .map((r) => new URL(r.path, board.url).searchParams)
    expect(lists.map((q) => [q.get('labels'), q.get('page') ?? '1'])).toEqual([
      [trigger, '1'],
      [trigger, '2'], // GitHub
      [trigger, '1'],
      [trigger, '2'], // GitLab issues
      [trigger, '1'], // GitLab merge requests
    ])
    expect(board.github[129]?.labels).toEqual([trigger, 'agent: working on it'])
    expect(board.gitlab[102]?.labels).toEqual([trigger, 'agent: working on it'])
    // The pull request's task is done: its label moves, the old one taken off by its name.
    await query(`UPDATE fleet_jobs SET state = 'done', outcome = 'completed', finished_at = now() WHERE spec->>'github' = 'acme/shop#130'`)
    expect((await poll())[0]?.labelled).toEqual([{ ref: 'acme/shop#130', label: 'agent: done' }])
    expect(board.github[129]?.labels).toEqual([trigger, 'agent: done'])
    expect(board.requests.filter((r) => r.method === 'DELETE').map((r) => r.path)).toEqual([
      `/repos/acme/shop/issues/130/labels/${encodeURIComponent('agent: working on it')}`,
    ])
  })

  it.runIf(canKillServer())(
    'PostgreSQL gone mid-pass: --once says so in one line and exits 1; a running poller says so in one line and its next pass queues what it missed',
    async () => {
      const board = await startFakeBoard()
      const s = await runSetup(forges(board))
      board.add('gitlab', 1, ['agent'])
      let down = false
      onTestFinished(async () => {
        if (down) await database.server.restart()
      })
      // The database is killed while the pass waits for GitLab's listing.
      const killOnList = () => {
        board.onRequest = async (r) => {
          if (r.method !== 'GET' || !r.path.includes('/issues?')) return
          board.onRequest = null
          await database.server.kill()
          down = true
        }
      }
      killOnList()
      const once = await s.run(['poll', '--once', '--gitlab', 'acme/backend/api', '--label', 'agent', '--workspace', s.ws], db())
      expect(once.code).toBe(1)
      expect(once.stderr).toMatch(
        /^ctxagent: cannot reach the fleet's database \(.+\) \(check fleet\.database_url or CTXAGENT_DATABASE_URL and that the server is up\)\n$/,
      )
      await database.server.restart()
      down = false
      expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])

      killOnList()
      process.env.CTXAGENT_DATABASE_URL = database.server.url
      const poller = s.start(['poll', '--gitlab', 'acme/backend/api', '--label', 'agent', '--workspace', s.ws, '--interval', '10s'])
      delete process.env.CTXAGENT_DATABASE_URL
      await until('the outage reported', async () => poller.err().includes('\n'))
      expect(poller.err()).toMatch(/^ctxagent: warning: poll: cannot reach the fleet's database \(.+\) \(tried again next pass\)\n$/)
      await database.server.restart()
      down = false
      await until('the next pass', async () => /poll gitlab:acme\/backend\/api: 1 open with the label; 1 queued \(acme\/backend\/api#1\)/.test(poller.out()))
      expect(await query(`SELECT spec->>'gitlab' AS ref, state FROM fleet_jobs`)).toEqual([{ ref: 'acme/backend/api#1', state: 'waiting' }])
      expect(board.gitlab[0]?.labels).toEqual(['agent', 'ctxagent:processing'])
      poller.child.kill('SIGTERM')
      expect((await exitOf(poller.child)).code).toBe(0)
      expect(poller.err().trim().split('\n')).toHaveLength(1)
    },
  )

  it('SIGTERM or SIGINT while the forge does not answer: poll ends at once, 143 or 130, its requests aborted', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('github', 1, ['agent'])
    board.add('gitlab', 2, ['agent'])
    board.hang.push({ method: 'GET', path: '/repos/acme/shop/issues' }, { method: 'GET', path: '/api/v4/projects/acme%2Fbackend%2Fapi/issues' })
    const cases: [string[], NodeJS.Signals, number, string][] = [
      [['--github', 'acme/shop'], 'SIGTERM', 143, '/repos/acme/shop/issues?'],
      [['--gitlab', 'acme/backend/api', '--once'], 'SIGINT', 130, '/api/v4/projects/acme%2Fbackend%2Fapi/issues?'],
    ]
    process.env.CTXAGENT_DATABASE_URL = database.server.url
    const pollers = cases.map(([args]) => s.start(['poll', '--label', 'agent', '--workspace', s.ws, ...args]))
    delete process.env.CTXAGENT_DATABASE_URL
    for (const [i, [, signal, code, path]] of cases.entries()) {
      const poller = pollers[i]!
      await until(`the ${path} request`, async () => board.requests.some((r) => r.path.startsWith(path)))
      poller.child.kill(signal)
      expect(await exitOf(poller.child)).toEqual({ code, signal: null })
      expect(poller.err()).toBe(`ctxagent: poll stopped by ${signal} during a pass (the next pass of any poller finishes what it left)\n`)
    }
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])
    // Only what was asked went to the forges: no signal object flattened into query parameters.
    expect(board.requests.filter((r) => /signal/i.test(r.path))).toEqual([])
  })

  it('bad input: one line, exit 2, nothing queued; a forge that fails: one line, the pass retried, exit 1 with --once', async () => {
    const board = await startFakeBoard()
    const s = await runSetup(forges(board))
    board.add('github', 1, ['agent'])
    const cases: [string[], RegExp][] = [
      [['poll', '--label', 'agent'], /^ctxagent: nothing to poll \(give --github owner\/repo/],
      [['poll', '--github', 'acme/shop#1', '--label', 'agent'], /^ctxagent: --github acme\/shop#1 is not owner\/repo/],
      [['poll', '--gitlab', 'nogroup', '--label', 'agent'], /^ctxagent: --gitlab nogroup is not group\/project/],
      [['poll', '--github', 'acme/shop', '--label', 'ctxagent:done'], /^ctxagent: --label ctxagent:done is one of the labels poll sets itself/],
      [['poll', '--github', 'acme/shop', '--label', 'a,b'], /^ctxagent: --label 'a,b' is not a label name/],
      [['poll', '--github', 'acme/shop', '--label', 'agent', '--interval', '1s'], /--interval.*at least 10s/],
    ]
    for (const [args, message] of cases) {
      const res = await s.run(args, db())
      expect(res.stderr).toMatch(message)
      expect(res.stderr.trim().split('\n')).toHaveLength(1)
      expect(res.code).toBe(2)
    }
    const noDb = await s.run(['poll', '--github', 'acme/shop', '--label', 'agent'])
    expect(noDb).toMatchObject({
      code: 2,
      stderr: "ctxagent: poll needs the fleet's PostgreSQL database (set fleet.database_url in the config, or CTXAGENT_DATABASE_URL)\n",
    })
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])
    board.failures.push(
      { method: 'GET', path: '/repos/acme/shop/issues', status: 500, message: 'Server Error' },
      { method: 'GET', path: '/repos/acme/shop/issues', status: 500, message: 'Server Error' },
      { method: 'GET', path: '/repos/acme/shop/issues', status: 500, message: 'Server Error' },
    )
    const failing = await s.run(['poll', '--once', '--github', 'acme/shop', '--label', 'agent', '--workspace', s.ws], db())
    expect(failing.code).toBe(1)
    expect(failing.stderr).toMatch(/^ctxagent: warning: poll github:acme\/shop: GitHub request for acme\/shop failed \(500\).*\(tried again next pass\)\n$/)
    expect(await query('SELECT count(*)::int AS n FROM fleet_jobs')).toEqual([{ n: 0 }])
  })
})
