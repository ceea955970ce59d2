import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { invokedAs } from '../../src/commands/demo.js'
import { BIN, ROOT } from '../helpers/run.js'
import { jsonl } from './harness.js'

describe('ctxagent demo', () => {
  it('replays the bundled session end to end with no config, no key and no network: compacts twice, pauses, resumes, completes', () => {
    const home = mkdtempSync(join(tmpdir(), 'ctxagent-demo-test-'))
    onTestFinished(() => rmSync(home, { recursive: true, force: true }))
    // A directory with no config.yaml; no key; the LLM settings point nowhere.
    const res = spawnSync(process.execPath, [BIN, 'demo', '--home', home], {
      cwd: home,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '', HOME: home, NO_COLOR: '1', OPENAI_API_KEY: '', HTTPS_PROXY: 'http://127.0.0.1:9', HTTP_PROXY: 'http://127.0.0.1:9' },
    })
    expect(res.status, res.stderr).toBe(0)
    expect(res.stdout).toMatch(/replayed 36 turns in [\d.]+s, paused by request after turn 18 and resumed; the task is completed/)
    // No ctxagent on PATH, run from elsewhere: the commands it prints name the launcher by its path.
    expect(res.stdout).toContain(`$ ${realpathSync(BIN)} view`)
    expect(res.stdout).toContain(`try:                 ${realpathSync(BIN)} --home ${home} view`)
    expect(res.stdout).toContain('Context Storage Statistics')
    const uuid = /the task directory: +\S+\/completed\/(\S+)/.exec(res.stdout)?.[1] as string
    const dir = join(home, 'completed', uuid)
    const state = JSON.parse(readFileSync(join(dir, 'state.json'), 'utf8')) as Record<string, unknown>
    expect(state).toMatchObject({ status: 'completed', turns: 36, finish_status: 'done' })
    expect(Number(state.compression_count)).toBeGreaterThanOrEqual(2)
    expect(jsonl(join(dir, 'inbox.jsonl')).map((r) => [r.kind, r.action])).toEqual([
      ['control', 'pause'],
      ['reply', 'pause'],
    ])
    const tools = jsonl(join(dir, 'tools.jsonl'))
    expect(tools).toHaveLength(36)
    expect(tools.filter((t) => t.status !== 'success')).toEqual([])
    expect(readFileSync(join(dir, 'final_summary.txt'), 'utf8')).toContain('## Original Task')
    // The fixed project: its tests pass, with the regression tests the session added.
    const workspace = /the fixed project: +(\S+)/.exec(res.stdout)?.[1] as string
    onTestFinished(() => rmSync(join(workspace, '..'), { recursive: true, force: true }))
    const tests = spawnSync(process.execPath, ['test/run.mjs'], { cwd: workspace, encoding: 'utf8' })
    expect(tests.stdout).toMatch(/22 passed, 0 failed/)
    expect(readFileSync(join(workspace, 'src', 'invoice.js'), 'utf8')).toContain('this.chargedShare(subtotal, discount)')
  })
})

describe('the commands the demo prints', () => {
  it('name ctxagent when that is this program on PATH, ./bin/ctxagent from the project, else the full path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ctxagent-path-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    expect(invokedAs({ PATH: '/usr/bin' }, ROOT, BIN)).toBe('./bin/ctxagent')
    expect(invokedAs({ PATH: '/usr/bin' }, dir, BIN)).toBe(realpathSync(BIN))
    mkdirSync(join(dir, 'bin'))
    symlinkSync(BIN, join(dir, 'bin', 'ctxagent'))
    expect(invokedAs({ PATH: `/usr/bin:${join(dir, 'bin')}` }, dir, BIN)).toBe('ctxagent')
  })
})
