import { describe, expect, it } from 'vitest'
import { messageView } from '../../src/serve/message-view.js'
import { messageItem } from '../../src/serve/task-page.js'

describe('messageView: one message as the page and the live stream both show it', () => {
  it('marks, the tool result collapsed with a preview, each call with its main argument', () => {
    const summarized = messageView({ seq: 4, role: 'assistant', content: 'old', is_summarized: true, visible: false })
    expect(summarized).toMatchObject({
      seq: 4,
      kind: 'assistant',
      classes: 'msg m-assistant summarized hidden',
      marks: ['summarized', 'hidden'],
      text: 'old',
      result: null,
    })
    const result = messageView({ seq: 5, role: 'tool', tool_name: 'grep', content: `a\n\n  b${'c'.repeat(200)}` })
    expect(result.result?.summary).toBe(`result · 206 chars: a b${'c'.repeat(86)}…`)
    expect(result).toMatchObject({ tool: 'grep', text: '' })
    const calls = messageView({
      seq: 6,
      role: 'assistant',
      content: null,
      tool_calls: [
        { function: { name: 'run_command', arguments: '{"command":"npm  test"}' } },
        { function: { name: 'x_mcp', arguments: '{"n":1,"q":"find it"}' } },
        { function: { arguments: 'oops' } },
      ],
    })
    expect(calls.calls).toEqual([
      { name: 'run_command', about: 'npm test', args: '{\n  "command": "npm  test"\n}' },
      { name: 'x_mcp', about: 'find it', args: '{\n  "n": 1,\n  "q": "find it"\n}' },
      { name: '?', about: null, args: 'oops' },
    ])
    expect(messageView({ role: 'we!rd', content: { a: 1 } })).toMatchObject({ seq: null, role: 'we!rd', kind: 'werd', text: '{"a":1}' })
  })

  it('the server renders the view: marks shown, terminal escapes made harmless, text escaped', () => {
    const html = messageItem({ seq: 2, role: 'assistant', content: '<b>\u001b[31mred\u001b[0m</b>', is_summarized: true }).toString()
    expect(html).toBe(
      '<li class="msg m-assistant summarized"><span class="seq">#2</span> <span class="role r-assistant">assistant</span> <span class="mark">summarized</span><pre>&lt;b&gt;red&lt;/b&gt;</pre></li>',
    )
  })
})
