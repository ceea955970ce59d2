import type { StoredMessage } from '../storage/format/records.js'
import { clip } from '../text.js'

const PATH = /(?:\.{0,2}\/)?(?:[\w@.-]+\/)+[\w.-]+\.[A-Za-z0-9]{1,8}\b|\b[\w-]+\.(?:ts|tsx|js|mjs|cjs|jsx|py|rb|go|rs|java|kt|c|h|cpp|hpp|cs|php|swift|json|ya?ml|toml|md|sql|sh|css|html|lock)\b/g
const ERROR = /\b(error|exception|failed|failure|traceback|panic|fatal|denied|cannot|not found|undefined is not)\b/i
const DECISION = /\b(decided|decision|instead of|chose|choose|will use|going to|plan(?:ned)?:|because|the fix is|root cause)\b/i

/**
 * A summary without an LLM (SPEC §5): keeps the original task, every file path, the
 * error lines, decisions and the tools used, in the same four sections as the LLM
 * summary. A previous summary's facts are carried over by extracting from it too.
 */
export function extractiveSummary(previous: string | null, messages: readonly StoredMessage[], task: StoredMessage | null): string {
  const texts = [...(previous ? [previous] : []), ...messages.map((m) => `${m.content}\n${m.tool_calls?.map((c) => c.function.arguments).join('\n') ?? ''}`)]
  const paths = unique(texts.flatMap((t) => t.match(PATH) ?? []), 80)
  const lines = texts.flatMap((t) => t.split('\n')).map((l) => l.trim()).filter(Boolean)
  const errors = unique(lines.filter((l) => ERROR.test(l)).map((l) => clip(l, 240)), 25)
  const decisions = unique(lines.filter((l) => DECISION.test(l)).map((l) => clip(l, 240)), 15)
  const tools = new Map<string, number>()
  for (const m of messages) {
    for (const c of m.tool_calls ?? []) tools.set(c.function.name, (tools.get(c.function.name) ?? 0) + 1)
    if (m.role === 'tool' && m.tool_name && !m.tool_calls) tools.set(m.tool_name, tools.get(m.tool_name) ?? 1)
  }
  const lastAssistant = [...messages].reverse().find((m) => m.role === 'assistant' && m.content.trim() !== '')
  const first = messages[0]?.seq
  const last = messages.at(-1)?.seq
  return [
    '## Original Task',
    task ? task.content : '(not found in the summarized messages)',
    '',
    '## Completed Work',
    `- Summarized messages ${first ?? '-'}-${last ?? '-'} (${messages.length} messages, extractive: no LLM was used)`,
    ...(tools.size ? [`- Tools used: ${[...tools].map(([name, n]) => `${name} ×${n}`).join(', ')}`] : []),
    '',
    '## Key Discoveries',
    ...(paths.length ? [`- Files: ${paths.join(', ')}`] : []),
    ...errors.map((e) => `- Error: ${e}`),
    ...decisions.map((d) => `- Decision: ${d}`),
    '',
    '## Current State',
    `- Last assistant message: ${lastAssistant ? clip(lastAssistant.content.replace(/\s+/g, ' '), 400) : '(none)'}`,
  ].join('\n')
}

function unique(items: string[], max: number): string[] {
  return [...new Set(items)].slice(0, max)
}
