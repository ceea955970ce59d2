import { describe, expect, it } from 'vitest'
import { prune, pruneBoundary } from '../../src/context/prune.js'
import type { PrunePolicy } from '../../src/context/prune.js'
import type { WindowMessage } from '../../src/storage/format/records.js'

const HEAD: WindowMessage[] = [
  { role: 'system', content: 'sys' },
  { role: 'user', content: 'the task' },
]

function round(n: number): WindowMessage[] {
  return [
    {
      role: 'assistant',
      content: `step ${n}`,
      tool_calls: [{ id: `c${n}`, type: 'function', function: { name: 'read_file', arguments: `{"path":"f${n}"}` } }],
    },
    { role: 'tool', content: `[blob:b${n}] output ${n}`, tool_call_id: `c${n}`, tool_name: 'read_file' },
  ]
}

/** The window after `rounds` rounds, built by push as a task's window grows. */
function windowOf(rounds: number): WindowMessage[] {
  const out = [...HEAD]
  for (let n = 0; n < rounds; n++) out.push(...round(n))
  return out
}

const wholeRounds = (messages: readonly WindowMessage[]) => messages.filter((m) => m.role === 'tool' && !m.content.startsWith('[pruned]')).length

describe('prune in steps (issue 30: a prefix that stays put)', () => {
  const policy: PrunePolicy = { protectedTurns: 3, protectedToolRounds: 3, stepRounds: 12 }

  it('keeps between the protected rounds and protected + step - 1 whole, and moves the boundary once per step', () => {
    const moves: number[] = []
    let last = 0
    let whole = 0
    for (let r = 1; r <= 100; r++) {
      const window = windowOf(r)
      const out = prune(window, policy)
      expect(wholeRounds(out)).toBeGreaterThanOrEqual(Math.min(r, 3))
      expect(wholeRounds(out)).toBeLessThanOrEqual(3 + 12 - 1)
      const boundary = pruneBoundary(window, policy)
      expect(boundary).toBeGreaterThanOrEqual(last)
      last = boundary
      if (wholeRounds(out) < whole) moves.push(r)
      whole = wholeRounds(out)
    }
    // Rounds 15, 27, 39…: each step prunes 12 rounds at once.
    expect(moves).toEqual([15, 27, 39, 51, 63, 75, 87, 99])
  })

  it('between steps each request is the previous one plus the new messages, byte for byte; a pruned output keeps its blob reference', () => {
    let previous = JSON.stringify(prune(windowOf(1), policy))
    let breaks = 0
    for (let r = 2; r <= 100; r++) {
      const request = JSON.stringify(prune(windowOf(r), policy))
      if (!request.startsWith(previous.slice(0, -1))) breaks++
      previous = request
    }
    expect(breaks).toBe(8)
    expect(prune(windowOf(40), policy).find((m) => m.role === 'tool')?.content).toBe('[pruned] [blob:b0]')
  })

  it('is a function of the window alone: a window rebuilt from its records (a resume) prunes as the one grown by push', () => {
    const grown = windowOf(50)
    const rebuilt = JSON.parse(JSON.stringify(grown)) as WindowMessage[]
    expect(JSON.stringify(prune(rebuilt, policy))).toBe(JSON.stringify(prune(grown, policy)))
  })

  it('a step of 1 is the eager boundary of before: one round pruned each turn', () => {
    const eager = { protectedTurns: 3, protectedToolRounds: 5 }
    for (let r = 6; r <= 30; r++) {
      expect(pruneBoundary(windowOf(r), { ...eager, stepRounds: 1 })).toBe(pruneBoundary(windowOf(r), eager))
      expect(wholeRounds(prune(windowOf(r), { ...eager, stepRounds: 1 }))).toBe(5)
    }
  })

  it('user turns: the turn boundary moves in the same steps of rounds', () => {
    // A chat: each user message starts a turn of one round; 3 turns protected.
    const chat = [...HEAD]
    let previous = ''
    let breaks = 0
    for (let n = 0; n < 60; n++) {
      chat.push({ role: 'user', content: `question ${n}` }, ...round(n), { role: 'assistant', content: `answer ${n}` })
      const request = JSON.stringify(prune(chat, { protectedTurns: 3, protectedToolRounds: 100, stepRounds: 12 }))
      if (previous !== '' && !request.startsWith(previous.slice(0, -1))) breaks++
      previous = request
      expect(wholeRounds(prune(chat, { protectedTurns: 3, protectedToolRounds: 100, stepRounds: 12 }))).toBeGreaterThanOrEqual(Math.min(n + 1, 3))
    }
    expect(breaks).toBeLessThanOrEqual(5)
  })
})
