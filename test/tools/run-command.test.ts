import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { setup, sleep } from './fixture.js'
import { expectNoPiece, filler } from '../helpers/secret-pieces.js'

/** Running: signal 0 reaches it and it is not a zombie waiting for its (re)parent to reap it. */
const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return true
  }
}

/** Waits (up to 50 s: a busy machine is slow, not broken) for the command to have written `n` pids, one a line, to `file`. */
async function pidsIn(file: string, n: number): Promise<number[]> {
  for (let i = 0; i < 1000; i++) {
    const lines = existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').filter(Boolean) : []
    if (lines.length >= n) return lines.map(Number)
    await sleep(50)
  }
  throw new Error(`${file} never held ${n} pids`)
}

async function expectAllGone(pids: number[]): Promise<void> {
  // Killed processes may take a moment to be reaped; generous, not a timing assertion.
  for (let i = 0; i < 200 && pids.some(alive); i++) await sleep(50)
  expect(pids.filter(alive)).toEqual([])
}

describe('run_command', () => {
  it('returns the exit code then the output; a failing command is a result, not a tool error', async () => {
    const s = setup()
    expect(await s.call('run_command', { command: 'echo out; echo err >&2; exit 3' })).toMatchObject({
      status: 'success',
      error: null,
      output: 'exit code 3\nout\nerr',
    })
    expect((await s.call('run_command', { command: 'true' })).output).toBe('exit code 0\n(no output)')
    expect((await s.call('run_command', { command: 'pwd' })).output).toBe(`exit code 0\n${s.ws}`)
    expect((await s.call('run_command', { command: 'kill -SEGV $$' })).output).toBe('killed by SIGSEGV\n(no output)')
  })

  // Without a sandbox (tools.sandbox: none) the environment filter and the process-group kill are what hold.
  it('closes stdin, removes secrets from the environment and turns pagers and prompts off (tools.sandbox: none)', async () => {
    const s = setup({ sandbox: { kind: 'none' } })
    const secrets = {
      GITHUB_TOKEN: 'ghp_x',
      OPENAI_API_KEY: 'sk-x',
      GITLAB_TOKEN: 'glpat-x',
      ANTHROPIC_API_KEY: 'sk-ant-x',
      CTXAGENT_LLM_API_KEY: 'k',
      CTXAGENT_HOME: '/h',
    }
    Object.assign(process.env, secrets, { CTXAGENT_TEST_KEEP: undefined, HARMLESS_VAR: 'kept' })
    onTestFinished(() => {
      for (const key of [...Object.keys(secrets), 'HARMLESS_VAR']) delete process.env[key]
    })
    // `cat` with an open stdin would wait forever (until the 120 s timeout).
    const out = await s.call('run_command', { command: 'cat; env | sort' })
    expect(out.output).toMatch(/^exit code 0\n/)
    for (const key of Object.keys(secrets)) expect(out.output).not.toContain(`${key}=`)
    expect(out.output).toContain('HARMLESS_VAR=kept')
    expect(out.output).toMatch(/^PAGER=cat$/m)
    expect(out.output).toMatch(/^GIT_PAGER=cat$/m)
    expect(out.output).toMatch(/^GIT_TERMINAL_PROMPT=0$/m)
  })

  it('sets tools.limits without a sandbox too (prlimit), and says when one was reached', async () => {
    const limits = { memory_mb: 256, processes: 77, file_size_mb: 3, open_files: 99, cpu_seconds: 1 }
    const s = setup({ sandbox: { kind: 'none', limits } })
    const out = await s.call('run_command', { command: 'grep -E "^Max (processes|open files|file size|data size|cpu time)" /proc/self/limits' })
    expect(out.output).toMatch(/^Max processes +77 +77 /m)
    expect(out.output).toMatch(/^Max open files +99 +99 /m)
    expect(out.output).toMatch(/^Max file size +3145728 +3145728 /m)
    expect(out.output).toMatch(/^Max data size +268435456 +268435456 /m)
    expect(out.output).toMatch(/^Max cpu time +1 +2 /m)
    const spin = await s.call('run_command', { command: 'while :; do :; done' })
    expect(spin.output).toBe('killed by SIGXCPU\n(no output)\n[CPU time limit (tools.limits.cpu_seconds = 1) reached]')
  })

  it('keeps the head and the tail of a huge output, within 30,000 characters', async () => {
    const s = setup()
    // ~1.3 MB on stdout.
    const out = await s.call('run_command', { command: 'seq 1 200000' })
    expect(out.output.length).toBeLessThanOrEqual(30_000)
    expect(out.output).toMatch(/^exit code 0\n1\n2\n3\n/)
    const omitted = /\n\[… ([\d,]+) chars omitted …\]\n/.exec(out.output)
    expect(Number(omitted?.[1]?.replaceAll(',', ''))).toBeGreaterThan(1_200_000)
    expect(out.output).toMatch(/\n199999\n200000$/)
  })

  // Issue #36: a key printed whole but across the head/tail cut left as two unmasked pieces.
  it('a secret across the head cut or the tail cut, at every offset, is masked whole before the cut', async () => {
    const s = setup({ sandbox: { kind: 'none' } })
    const key = 'sk-proj-Q7vLm2Xc9RtB4nKp8WzY3hJd6FgA1sE5uT0o'
    const [HEAD, TAIL] = [14_900, 14_900]
    for (let k = 0; k <= key.length; k++) {
      // The first key starts k before the head's end; the second k before the tail's start.
      writeFileSync(join(s.ws, 'out.txt'), `${filler(HEAD - k - 1)} ${key} ${filler(100_000)} ${key} ${filler(TAIL + k - key.length - 1)}`)
      const out = await s.call('run_command', { command: 'cat out.txt' })
      expect(out.output).toMatch(/chars omitted/)
      expectNoPiece(out.output, key)
    }
  })

  it.each(['timeout', 'abort'] as const)('kills the whole process group on %s', async (how) => {
    const controller = new AbortController()
    const s = setup({ signal: controller.signal, sandbox: { kind: 'none' } })
    // A background sleep, a subshell's sleep, and the shell itself, each recording its pid.
    const command = 'sleep 300 & echo $! >> pids; (sleep 300 & echo $! >> pids; wait) & echo $$ >> pids; sleep 300'
    const pending = s.call('run_command', { command, ...(how === 'timeout' ? { timeout_seconds: 1 } : {}) })
    const pids = await pidsIn(join(s.ws, 'pids'), 3)
    if (how === 'abort') controller.abort()
    const out = await pending
    expect(out.status).toBe('error')
    expect(out.output).toMatch(how === 'timeout' ? /^timed out after 1s \(the command and its process group were killed\)/ : /^aborted: the task is stopping/)
    expect(out.aborted === true).toBe(how === 'abort')
    await expectAllGone(pids)
  })

  it('escalates to SIGKILL when the command ignores SIGTERM', async () => {
    const s = setup({ sandbox: { kind: 'none' } })
    const command = `trap '' TERM; echo $$ > pids; while :; do sleep 1; done`
    const pending = s.call('run_command', { command, timeout_seconds: 1 })
    const pids = await pidsIn(join(s.ws, 'pids'), 1)
    const out = await pending
    expect(out).toMatchObject({ status: 'error', error: 'timed out after 1s' })
    await expectAllGone(pids)
  })

  it('uses the configured timeout when none is given, and caps a given one at 600 s', async () => {
    const s = setup({ commandTimeoutSeconds: 1 })
    expect((await s.call('run_command', { command: 'sleep 30' })).error).toBe('timed out after 1s')
    const capped = await s.call('run_command', { command: 'true', timeout_seconds: '5000' })
    expect(capped).toMatchObject({ status: 'success', args: { timeout_seconds: 5000 } })
  })

  it('does not start when the task is already stopping', async () => {
    const controller = new AbortController()
    controller.abort()
    const s = setup({ signal: controller.signal })
    const out = await s.call('run_command', { command: 'touch started' })
    expect(out).toMatchObject({ status: 'error', aborted: true })
    expect(existsSync(join(s.ws, 'started'))).toBe(false)
  })

  it('does not leave background processes behind after the command exits', async () => {
    const s = setup({ sandbox: { kind: 'none' } })
    const out = await s.call('run_command', { command: '(sleep 300 & echo $! > bg.pid) ; echo started' })
    expect(out.output).toBe('exit code 0\nstarted')
    await expectAllGone([Number(readFileSync(join(s.ws, 'bg.pid'), 'utf8'))])
  })
})
