import { findingsText } from '../helpers/run.js'
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { alive, exitOf, groupAlive, killGroup } from '../helpers/wait.js'
import { agentRequests, expectContinuousSeq, expectWellFormed, jsonl, onlyTask, readTask, runSetup, waitFor } from './harness.js'
import type { RunSetup } from './harness.js'

/** Tests that read a command's pids from the host need it outside a PID namespace (the sandbox's own kill is tested in test/tools/sandbox.test.ts). */
const NO_SANDBOX = 'tools:\n  sandbox: none\n'
/** Fast heartbeats, so that lock loss and staleness show within seconds. */
const FAST_LOCKS = 'locks:\n  heartbeat_seconds: 0.5\n  stale_after_seconds: 2\n'

function runningUuid(s: RunSetup): string | null {
  return s.tree.layout.list('running')[0] ?? null
}

describe('run: stops, resumes and recovery', () => {
  it('SIGINT during an LLM request pauses (exit 130); --resume continues seq and finishes with well-formed requests', async () => {
    const s = await runSetup()
    s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] }, { delayMs: 30_000, content: 'never seen' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    await waitFor('the second LLM request', () => s.fake.requests.length >= 2)
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(130)
    const paused = onlyTask(s.tree)
    expect(paused.location).toBe('paused')
    expect(paused.state).toMatchObject({ status: 'paused', turns: 1 })
    expect(paused.files).not.toContain('.lock')
    expect(started.err()).toMatch(/paused: SIGINT|paused \(SIGINT\)/)

    s.fake.queue.push(finish())
    const resumed = await s.run(['run', '--resume', paused.uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    const done = readTask(s.tree, paused.uuid)
    expect(done.location).toBe('completed')
    expectContinuousSeq(done.messages)
    expect(done.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant', 'tool'])
    expect(done.state).toMatchObject({ turns: 2 })
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('SIGINT during a long run_command kills its whole process group, answers the call [aborted], and exits 130', async () => {
    const s = await runSetup(NO_SANDBOX)
    const pids = join(s.ws, 'pids.txt')
    s.fake.queue.push({ calls: [{ name: 'run_command', arguments: { command: `sleep 300 & echo $! > pids.txt; echo $$ >> pids.txt; sleep 300` } }] })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--allow-shell'])
    const recorded = await waitFor(
      'the command pids',
      () => existsSync(pids) && readFileSync(pids, 'utf8').trim().split('\n').length >= 2 && readFileSync(pids, 'utf8'),
    )
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(130)
    for (const pid of recorded.trim().split('\n').map(Number)) await waitFor(`pid ${pid} gone`, () => !alive(pid), 30_000)
    const task = onlyTask(s.tree)
    expect(task.location).toBe('paused')
    const result = task.messages.at(-1)
    expect(result).toMatchObject({ role: 'tool', tool_name: 'run_command' })
    expect(String(result?.content)).toMatch(/^\[aborted\]/)
    expect(task.tools.at(-1)).toMatchObject({ status: 'error' })
  })

  it('a second SIGINT while the first is still stopping a tool exits 130 at once, kills the tool process group, and leaves the task for recovery', async () => {
    const s = await runSetup(FAST_LOCKS + NO_SANDBOX)
    // A command that ignores SIGTERM: stopping it takes the 2 s grace period before SIGKILL.
    s.fake.queue.push({ calls: [{ name: 'run_command', arguments: { command: "trap '' TERM; echo $$ > pid.txt; while true; do sleep 0.1; done" } }] })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--allow-shell'])
    const uuid = await waitFor('the task', () => runningUuid(s))
    // The command runs and ignores TERM once it wrote its pid (the trap comes first).
    await waitFor('the command', () => existsSync(join(s.ws, 'pid.txt')) && readFileSync(join(s.ws, 'pid.txt'), 'utf8').endsWith('\n'))
    started.child.kill('SIGINT')
    // The first SIGINT is being handled (the command has 2 s of grace to stop): the second exits at once.
    await waitFor('the first SIGINT', () => started.err().includes('SIGINT: pausing at once'))
    started.child.kill('SIGINT')
    expect((await exitOf(started.child)).code).toBe(130)
    expect(started.err()).toContain(`Take it back with: ctxagent run --resume ${uuid}`)
    // The command ignored SIGTERM; exiting at once still kills its process group.
    const pid = Number(readFileSync(join(s.ws, 'pid.txt'), 'utf8'))
    await waitFor(`pid ${pid} gone`, () => !alive(pid), 30_000)
    // Not paused: still in running/ with its lock and a fresh heartbeat; on this host the dead pid is proof enough.
    expect(readTask(s.tree, uuid).location).toBe('running')
    s.fake.queue.push(finish())
    const resumed = await s.run(['run', '--resume', uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    // However long the machine took meanwhile (the heartbeat may or may not have aged past stale_after), the dead pid is named.
    expect(resumed.stderr).toContain(`pid ${started.child.pid} is gone`)
    expect(resumed.stderr).toContain('resume takes it over')
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  for (const recovery of ['resume', 'fail'] as const) {
    it(`kill -9 mid-turn on one host (recovery: ${recovery}): watch-locks --once recovers the task ${recovery === 'resume' ? 'to paused/' : 'as failed'}, list and view say it died, and run --resume completes it, seq continuous, nothing answered twice`, async () => {
      const s = await runSetup(`${FAST_LOCKS}fleet:\n  recovery: ${recovery}\n`)
      // Two calls: the first answered, the agent killed while the second (a slow LLM turn after it) is on its way.
      s.fake.queue.push({ calls: [{ name: 'read_file', arguments: { path: 'calc.js' }, id: 'c1' }] }, { delayMs: 30_000, content: 'never' })
      const started = s.start(['run', '--task', 't', '--workspace', s.ws])
      await waitFor('the second LLM request', () => s.fake.requests.length >= 2)
      started.child.kill('SIGKILL')
      await exitOf(started.child)
      const uuid = runningUuid(s) as string
      const reaped = await s.run(['watch-locks', '--once', '--json'], pastStaleAfter())
      expect(reaped.code, reaped.stderr).toBe(0)
      const task = readTask(s.tree, uuid)
      expect(task.location).toBe(recovery === 'resume' ? 'paused' : 'completed')
      expect(task.state).toMatchObject(
        recovery === 'resume'
          ? { status: 'paused', paused_by: 'reaper', error: expect.stringContaining(`pid ${started.child.pid}`) }
          : { status: 'failed', last_activity: 'reaped', error: expect.stringContaining(`pid ${started.child.pid}`) },
      )
      expectContinuousSeq(task.messages)
      expect(task.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool'])
      // list and view say which tasks died and can be resumed.
      const listed = await s.run(['list'])
      expect(listed.stdout).toMatch(new RegExp(`${uuid.slice(0, 8)}\\s+${recovery === 'resume' ? 'paused' : 'failed'} \\(died\\)`))
      const listedJson = await s.run(['list', '--json'])
      expect(JSON.parse(listedJson.stdout.trim().split('\n')[0] as string)).toMatchObject({ uuid, died: true })
      const viewed = await s.run(['view', uuid])
      expect(viewed.stdout).toContain(`Died: its agent died; resumable: ctxagent run --resume ${uuid}`)
      s.fake.queue.push(finish())
      const resumed = await s.run(['run', '--resume', uuid])
      expect(resumed.code, resumed.stderr).toBe(0)
      const after = readTask(s.tree, uuid)
      expect(after.location).toBe('completed')
      expect(after.state).toMatchObject({ status: 'completed', error: null })
      expectContinuousSeq(after.messages)
      // From its last recorded message on: c1 answered once, nothing before it sent again as new.
      expect(after.messages.filter((m) => m.tool_call_id === 'c1')).toHaveLength(1)
      expect(after.messages.slice(0, 4)).toEqual(task.messages)
      for (const r of agentRequests(s.fake)) expectWellFormed(r)
    })
  }

  it('watch-locks reaping an agent SIGKILLed mid-command kills the command it left running, and says so', async () => {
    const s = await runSetup(FAST_LOCKS + NO_SANDBOX)
    s.fake.queue.push({ calls: [{ name: 'run_command', arguments: { command: 'echo $$ > cmd.pid; sleep 100 & sleep 100' } }] })
    onTestFinished(() => {
      const group = existsSync(join(s.ws, 'cmd.pid')) ? Number(readFileSync(join(s.ws, 'cmd.pid'), 'utf8')) : 0
      if (group > 0) killGroup(group)
    })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--allow-shell'])
    const uuid = await waitFor('the task', () => runningUuid(s))
    const group = await waitFor('the command', () => existsSync(join(s.ws, 'cmd.pid')) && Number(readFileSync(join(s.ws, 'cmd.pid'), 'utf8')))
    await waitFor('the lock naming it', () => readLockInfo(s, uuid)?.commands?.some((c) => c.pgid === group))
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    expect(alive(group)).toBe(true)
    const reaped = await s.run(['watch-locks', '--once', '--json'], pastStaleAfter())
    expect(reaped.code, reaped.stderr).toBe(0)
    expect(JSON.parse(findingsText(reaped.stdout).trim().split('\n')[0] as string)).toMatchObject({ uuid, action: 'reaped', killed_commands: [group] })
    await waitFor(`process group ${group} gone`, () => !groupAlive(group), 30_000)
    // recovery: resume (the default): paused to be resumed, the error naming what was killed.
    expect(readTask(s.tree, uuid).state).toMatchObject({
      status: 'paused',
      paused_by: 'reaper',
      error: expect.stringContaining(`killed the command(s) it left running (process group ${group})`),
    })
  })

  it('a resumed task whose agent was SIGKILLed mid-command kills that command, and answers calls without results [aborted: …] before the first request', async () => {
    const s = await runSetup(FAST_LOCKS + NO_SANDBOX)
    s.fake.queue.push({
      calls: [
        { name: 'read_file', arguments: { path: 'calc.js' }, id: 'c1' },
        { name: 'run_command', arguments: { command: 'echo $$ > c2.pid; sleep 100' }, id: 'c2' },
      ],
    })
    // A SIGKILLed agent cannot stop its command: the test does, whatever happens.
    onTestFinished(() => {
      const group = existsSync(join(s.ws, 'c2.pid')) ? Number(readFileSync(join(s.ws, 'c2.pid'), 'utf8')) : 0
      if (group > 0 && alive(group)) process.kill(-group, 'SIGKILL')
    })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws, '--allow-shell'])
    const uuid = await waitFor('the task', () => runningUuid(s))
    // Killed while the second call runs: the first has its result, the second none.
    await waitFor('the first result', () => jsonl(join(s.tree.layout.taskDir('running', uuid), 'tools.jsonl')).length === 1)
    const group = await waitFor('the command', () => existsSync(join(s.ws, 'c2.pid')) && Number(readFileSync(join(s.ws, 'c2.pid'), 'utf8')))
    await waitFor('the lock naming it', () => readLockInfo(s, uuid)?.commands?.some((c) => c.pgid === group))
    started.child.kill('SIGKILL')
    await exitOf(started.child)
    // Resuming a task whose agent died takes its stale lock over where it is.
    await heartbeatStale(s, uuid)
    s.fake.queue.push(finish())
    expect(alive(group)).toBe(true)
    const resumed = await s.run(['run', '--resume', uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    // The dead agent's lock named the command's process group: taking the task over killed it.
    expect(resumed.stderr).toContain(`killed the command(s) the dead agent left running (process group ${group})`)
    await waitFor(`pid ${group} gone`, () => !alive(group), 30_000)
    const task = readTask(s.tree, uuid)
    const c2 = task.messages.find((m) => m.tool_call_id === 'c2')
    expect(c2?.content).toBe('[aborted: the process stopped before this tool finished]')
    expect(task.messages.filter((m) => m.tool_call_id === 'c1')).toHaveLength(1)
    expectContinuousSeq(task.messages)
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('refuses to resume a task whose agent is alive (exit 4), and a finished one (exit 4)', async () => {
    const s = await runSetup()
    s.fake.queue.push({ delayMs: 30_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    const refused = await s.run(['run', '--resume', uuid])
    expect(refused.code).toBe(4)
    expect(refused.stderr).toMatch(/is running/)
    started.child.kill('SIGTERM')
    expect((await exitOf(started.child)).code).toBe(143)
    expect(readTask(s.tree, uuid).location).toBe('paused')
  })

  it('a lock taken over while the owner waits on a slow LLM stops it within two heartbeats, writing nothing more', async () => {
    const s = await runSetup('locks:\n  heartbeat_seconds: 1\n  stale_after_seconds: 3\n')
    s.fake.queue.push({ delayMs: 60_000, content: 'never' })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('the request', () => s.fake.requests.length >= 1)
    const unlocked = await s.run(['unlock', uuid, '--force'])
    expect(unlocked.code, unlocked.stderr).toBe(0)
    const dir = s.tree.layout.taskDir('completed', uuid)
    const before = readFileSync(join(dir, 'messages.jsonl'), 'utf8') + readFileSync(join(dir, 'state.json'), 'utf8')
    const exit = await exitOf(started.child)
    expect(exit.code).toBe(1)
    // It stopped waiting: the slow LLM's reply was never sent.
    expect(s.fake.answered).toBe(0)
    expect(started.err()).toMatch(/lost the lock/)
    expect(readFileSync(join(dir, 'messages.jsonl'), 'utf8') + readFileSync(join(dir, 'state.json'), 'utf8')).toBe(before)
    expect(readdirSync(s.tree.layout.dir('running'))).toEqual([])
  })

  it('ctxagent pause and compress ask a live owner, which acts at its next turn boundary', async () => {
    const s = await runSetup('context:\n  compression:\n    keep_recent: 2\n    min_to_compress: 2\n')
    let n = 0
    s.fake.fallback = (req) =>
      Array.isArray(req.body.tools)
        ? { delayMs: 150, calls: [{ name: 'glob', arguments: { pattern: `*.js${n++ % 2 ? '' : 'x'}${n}` } }] }
        : { content: '## Original Task\nsummary' }
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('a few turns', () => agentRequests(s.fake).length >= 4)
    const compressed = await s.run(['compress', uuid, '--json'])
    expect(compressed.code, compressed.stderr).toBe(0)
    expect(JSON.parse(compressed.stdout)).toMatchObject({ asked: 'owner', ok: true })
    const summaries = jsonl(join(s.tree.layout.taskDir('running', uuid), 'summaries.jsonl'))
    expect(summaries.at(-1)).toMatchObject({ request_id: expect.any(String) })
    const paused = await s.run(['pause', uuid])
    expect(paused.code, paused.stderr).toBe(0)
    expect(paused.stdout).toMatch(/paused/)
    expect((await exitOf(started.child)).code).toBe(0)
    const task = readTask(s.tree, uuid)
    expect(task.location).toBe('paused')
    expect(task.inbox.filter((r) => r.kind === 'reply').map((r) => r.action)).toEqual(['compress', 'pause'])
    // The next resume does not pause again: the request was handled once.
    s.fake.fallback = () => ({ content: 'done' })
    const resumed = await s.run(['run', '--resume', uuid])
    expect(resumed.code, resumed.stderr).toBe(0)
    for (const r of agentRequests(s.fake)) expectWellFormed(r)
  })

  it('ctxagent comment reaches the next request of a running agent once, in the docs/contract.md §6 format; two at once use the multi-comment format', async () => {
    const s = await runSetup()
    let n = 0
    s.fake.fallback = () => ({ delayMs: 200, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const started = s.start(['run', '--task', 't', '--workspace', s.ws])
    const uuid = await waitFor('the task', () => runningUuid(s))
    await waitFor('a request', () => s.fake.requests.length >= 1)
    expect((await s.run(['comment', uuid, 'please', 'use', 'tabs'])).code).toBe(0)
    const one = await waitFor('the comment in a request', () => s.fake.requests.find((r) => JSON.stringify(r.body.messages).includes('please use tabs')))
    const osUser = (await import('node:os')).userInfo().username
    expect(one.body.messages.filter((m) => m.role === 'user' && m.content === `[New Comment from @${osUser}]:\n> please use tabs`)).toHaveLength(1)
    // Both written while the agent waits on a request held until they are (not one slow for a while, which
    // two commands on a busy machine may outlast): the next turn reads them together.
    let release = () => {}
    const written = new Promise<void>((resolve) => (release = resolve))
    s.fake.fallback = () => ({ after: written, calls: [{ name: 'glob', arguments: { pattern: `*${n++}*` } }] })
    const count = s.fake.requests.length
    await waitFor('a held request', () => s.fake.requests.length > count)
    await Promise.all([s.run(['comment', uuid, 'first']), s.run(['comment', uuid, 'second'])])
    release()
    const both = await waitFor('both comments', () => s.fake.requests.find((r) => JSON.stringify(r.body.messages).includes('second')), 30_000)
    const last = both.body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? ''
    expect(last).toMatch(
      new RegExp(
        `^\\[New Comments Detected\\]:\\nComment 1 from @${osUser} \\(.+\\):\\n> (first|second)\\n\\nComment 2 from @${osUser} \\(.+\\):\\n> (first|second)\\n$`,
      ),
    )
    started.child.kill('SIGTERM')
    await exitOf(started.child)
    // Every comment was added exactly once.
    const task = readTask(s.tree, uuid)
    expect(task.messages.filter((m) => String(m.content).includes('please use tabs'))).toHaveLength(1)
    expect(task.messages.filter((m) => String(m.content).includes('second'))).toHaveLength(1)
    expect((await s.run(['comment', uuid, 'late'])).code).toBe(0)
    expect(readTask(s.tree, uuid).inbox.at(-1)).toMatchObject({ kind: 'message', content: 'late' })
  })

  it('pause of a paused task is a no-op; of a finished task exit 4; --wait gives up with exit 1', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: 'done' })
    expect((await s.run(['run', '--task', 't', '--workspace', s.ws])).code).toBe(0)
    const uuid = onlyTask(s.tree).uuid
    const finished = await s.run(['pause', uuid])
    expect(finished.code).toBe(4)
    renameSync(s.tree.layout.taskDir('completed', uuid), s.tree.layout.taskDir('paused', uuid))
    const again = await s.run(['pause', uuid])
    expect(again.code).toBe(0)
    expect(again.stdout).toMatch(/already paused/)
  })

  it('a new task with the same --task-id inherits the final summary of the last one; --no-inherit does not', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: 'first answer' }, { content: 'FINAL: add() fixed in calc.js' })
    expect((await s.run(['run', '--task', 'fix add', '--task-id', 'calc-7', '--workspace', s.ws])).code).toBe(0)
    const first = onlyTask(s.tree)
    expect(readFileSync(join(first.dir, 'final_summary.txt'), 'utf8')).toContain('FINAL: add() fixed in calc.js')

    s.fake.queue.push({ content: 'second answer' })
    const second = await s.run(['run', '--task', 'add tests', '--task-id', 'calc-7', '--workspace', s.ws, '--json'])
    expect(second.code, second.stderr).toBe(0)
    const outcome = JSON.parse(second.stdout) as { uuid: string; inherited_from: string }
    expect(outcome.inherited_from).toBe(first.uuid)
    const task = readTask(s.tree, outcome.uuid)
    expect(task.metadata.inherited_from).toBe(first.uuid)
    expect(task.messages.map((m) => m.role)).toEqual(['system', 'user', 'user', 'assistant'])
    expect(String(task.messages[2]?.content)).toContain('FINAL: add() fixed in calc.js')
    expect(String(task.messages[2]?.content)).toContain(first.uuid)
    const request = agentRequests(s.fake).at(-1)
    expect(JSON.stringify(request?.body.messages)).toContain('FINAL: add() fixed in calc.js')

    s.fake.queue.push({ content: 'third' })
    const third = await s.run(['run', '--task', 'again', '--task-id', 'calc-7', '--workspace', s.ws, '--no-inherit', '--json'])
    expect((JSON.parse(third.stdout) as { inherited_from: string | null }).inherited_from).toBeNull()

    // Without tasks.db, the scan finds it too.
    rmSync(s.tree.layout.db)
    s.fake.queue.push({ content: 'fourth' })
    const fourth = await s.run(['run', '--task', 'once more', '--task-id', 'calc-7', '--workspace', s.ws, '--json'])
    expect((JSON.parse(fourth.stdout) as { inherited_from: string | null }).inherited_from).toEqual(expect.any(String))
  })

  it('inheritance never crosses projects: clientA/app and clientB/app with the same --task-id keep their own findings', async () => {
    const s = await runSetup()
    const a = join(s.ws, 'clientA', 'app')
    const b = join(s.ws, 'clientB', 'app')
    mkdirSync(a, { recursive: true })
    mkdirSync(b, { recursive: true })
    s.fake.queue.push({ content: 'answer A' }, { content: 'FINAL: clientA secret finding' })
    const first = await s.run(['run', '--task', 'audit', '--task-id', 'audit-1', '--workspace', a, '--json'])
    expect(first.code, first.stderr).toBe(0)
    const firstUuid = (JSON.parse(first.stdout) as { uuid: string }).uuid
    s.fake.queue.push({ content: 'answer B' }, { content: 'FINAL: clientB' })
    const second = await s.run(['run', '--task', 'audit', '--task-id', 'audit-1', '--workspace', b, '--json'])
    expect((JSON.parse(second.stdout) as { inherited_from: string | null }).inherited_from).toBeNull()
    expect(JSON.stringify(agentRequests(s.fake).at(-1)?.body.messages)).not.toContain('clientA secret finding')
    // The same project again, by another path to it (a symlink), does inherit; and without tasks.db too.
    symlinkSync(a, join(s.ws, 'link-to-a'))
    rmSync(s.tree.layout.db)
    s.fake.queue.push({ content: 'answer A2' })
    const third = await s.run(['run', '--task', 'audit', '--task-id', 'audit-1', '--workspace', join(s.ws, 'link-to-a'), '--json'])
    expect((JSON.parse(third.stdout) as { inherited_from: string | null }).inherited_from).toBe(firstUuid)
  })

  it('replay plays a recorded task back, running its tools for real, to the same files', async () => {
    const s = await runSetup()
    s.fake.queue.push(
      { calls: [{ name: 'read_file', arguments: { path: 'calc.js' } }] },
      { calls: [{ name: 'edit_file', arguments: { path: 'calc.js', old_string: 'a - b', new_string: 'a + b' } }] },
      finish(),
    )
    expect((await s.run(['run', '--task', 'fix add', '--workspace', s.ws])).code).toBe(0)
    const recorded = onlyTask(s.tree)
    // A fresh copy of the project, replayed with no LLM.
    writeFileSync(join(s.ws, 'calc.js'), 'export function add(a, b) {\n  return a - b\n}\n')
    const requests = s.fake.requests.length
    const res = await s.run(['run', '--task', 'fix add', '--workspace', s.ws, '--provider', 'replay', '--replay-from', recorded.uuid, '--json'])
    expect(res.code, res.stderr).toBe(0)
    expect(s.fake.requests).toHaveLength(requests)
    const replayed = readTask(s.tree, (JSON.parse(res.stdout) as { uuid: string }).uuid)
    expect(readFileSync(join(s.ws, 'calc.js'), 'utf8')).toContain('a + b')
    const strip = (m: Record<string, unknown>) => ({ role: m.role, content: m.content, tool_calls: m.tool_calls })
    expect(replayed.messages.slice(1).map(strip)).toEqual(recorded.messages.slice(1).map(strip))
    expect(res.stderr).not.toMatch(/differs from the recording/)
    expect(replayed.metadata).toMatchObject({ config: { llm_provider: 'replay', model: 'replay' } })
  })
})

const finish = () => ({ calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] })

function readLockInfo(s: RunSetup, uuid: string): { commands?: { pgid: number }[]; heartbeat_at?: string } | null {
  try {
    return JSON.parse(readFileSync(join(s.tree.layout.taskDir('running', uuid), '.lock'), 'utf8')) as { commands?: { pgid: number }[]; heartbeat_at?: string }
  } catch {
    return null
  }
}

/**
 * The monitor's clock pinned past FAST_LOCKS' stale_after (CTXAGENT_NOW, docs/configuration.md): a dead
 * agent's lock is then stale by its heartbeat as well, which watch-locks, acting on its own, needs besides
 * the dead pid (docs/contract.md §4), with no wait for the heartbeat to age.
 */
const pastStaleAfter = () => ({ CTXAGENT_NOW: new Date(Date.now() + 5_000).toISOString() })

/**
 * Waits until the lock a dead agent left on `uuid` is stale by its heartbeat as well (older than
 * FAST_LOCKS' stale_after_seconds), as a resume takes it over in the test below. The moment comes from
 * the lock itself, not from a sleep long enough.
 */
async function heartbeatStale(s: RunSetup, uuid: string): Promise<void> {
  await waitFor('its lock stale by its heartbeat', () => {
    const at = Date.parse(readLockInfo(s, uuid)?.heartbeat_at ?? '')
    return !Number.isNaN(at) && Date.now() - at > 2_000
  })
}

describe('resume races', () => {
  it('two processes resuming one paused task: one runs it, the other says in one line that it was taken (exit 4), never a raw ENOENT', async () => {
    const s = await runSetup()
    s.fake.queue.push({ status: 400, content: 'bad request' })
    expect((await s.run(['run', '--task', 't', '--workspace', s.ws])).code).toBe(1)
    const original = onlyTask(s.tree)
    expect(original.location).toBe('paused')
    // Clones of the paused task, each raced by two resumes.
    const uuids = Array.from({ length: 6 }, (_, i) => `${original.uuid.slice(0, -4)}${(0xa000 + i).toString(16)}`)
    for (const uuid of uuids) {
      const dir = s.tree.layout.taskDir('paused', uuid)
      cpSync(original.dir, dir, { recursive: true })
      const meta = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as Record<string, unknown>
      writeFileSync(join(dir, 'metadata.json'), JSON.stringify({ ...meta, uuid }))
    }
    s.fake.fallback = () => ({ content: 'done' })
    for (const uuid of uuids) {
      const results = await Promise.all([s.run(['run', '--resume', uuid]), s.run(['run', '--resume', uuid])])
      expect(results.map((r) => r.code).sort(), results.map((r) => r.stderr).join('\n')).toEqual([0, 4])
      const loser = results.find((r) => r.code === 4) as { stderr: string }
      expect(loser.stderr).not.toMatch(/ENOENT|EEXIST|ENOTEMPTY/)
      expect(loser.stderr.trim().split('\n'), loser.stderr).toHaveLength(1)
      expect(loser.stderr).toMatch(/taken by another process|is running|paused|completed/)
    }
  })
})
