import { describe, expect, it } from 'vitest'
import { createRunLog } from '../../src/run/log.js'

function ttyStream() {
  const written: string[] = []
  const stream = { isTTY: true, columns: 200, write: (text: string) => written.push(text) > 0 } as unknown as NodeJS.WriteStream
  return { stream, written }
}

describe('the live status line', () => {
  it('says what the task waits on, and stops saying it when the wait ends', () => {
    const { stream, written } = ttyStream()
    const log = createRunLog({ uuid: '12345678-aaaa', stream, format: 'text', now: () => new Date() })
    log.status({ turn: 3, tokens: 1200, window: 800, lastTool: 'read_file calc.js' })
    expect(written.at(-1)).toMatch(/turn 3 · tokens 1,200 · window 800 · last tool read_file calc\.js$/)
    log.waiting?.('the LLM (fake-model)')
    expect(written.at(-1)).toMatch(/turn 3 .* · waiting on the LLM \(fake-model\) 0s$/)
    log.info('a line')
    // The log line, then the status line again below it.
    expect(written.at(-2)).toBe('[uuid:12345678] a line\n')
    expect(written.at(-1)).toMatch(/waiting on the LLM/)
    log.waiting?.(null)
    expect(written.at(-1)).toMatch(/last tool read_file calc\.js$/)
    log.close()
  })

  it('draws nothing off a terminal', () => {
    const { stream, written } = ttyStream()
    ;(stream as { isTTY: boolean }).isTTY = false
    const log = createRunLog({ uuid: '12345678-aaaa', stream, format: 'text', now: () => new Date() })
    log.waiting?.('the LLM')
    log.close()
    expect(written).toEqual([])
  })
})
