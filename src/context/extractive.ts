import type { StoredMessage } from '../storage/format/records.js'
import { clip } from '../text.js'

const PATH =
  /(?:\.{0,2}\/)?(?:[\w@.-]+\/)+[\w.-]+\.[A-Za-z0-9]{1,8}\b|\b[\w-]+\.(?:ts|tsx|js|mjs|cjs|jsx|py|rb|go|rs|java|kt|c|h|cpp|hpp|cs|php|swift|json|ya?ml|toml|md|sql|sh|css|html|lock)\b/g
const ERROR = /\b(error|exception|failed|failure|traceback|panic|fatal|denied|cannot|not found|undefined is not)\b/i
/** A test summary that reports no failure ("19 passed, 0 failed", "0 errors") is not an error line. */
const NO_FAILURE = /\b0 (?:failed|failures?|errors?)\b|\bno (?:errors?|failures?)\b/i
const DECISION = /\b(decided|decision|instead of|chose|choose|will use|going to|plan(?:ned)?:|because|the fix is|root cause)\b/i
/** Product names that look like files: Node.js, Vue.js, Next.js (a capitalised bare name ending in .js). */
const PRODUCT = /^[A-Z][\w-]*\.js$/

const MAX = { paths: 80, errors: 25, decisions: 15, work: 20 }

/** What an earlier extractive (or LLM) summary in the four sections says, item by item. */
interface Facts {
  work: string[]
  paths: string[]
  errors: string[]
  decisions: string[]
}

/**
 * A summary without an LLM (docs/contract.md §5): keeps the original task, every file path, the
 * error lines, decisions and the tools used, in the same four sections as the LLM
 * summary. A previous summary is read by its sections, not re-extracted as text, so
 * summaries nest without repeats (`- Error: - Error: …`): its completed work is carried
 * over, and in each list the newest facts come first, the oldest are what a cap drops.
 */
export function extractiveSummary(previous: string | null, messages: readonly StoredMessage[], task: StoredMessage | null): string {
  const before = previous ? factsOf(previous) : { work: [], paths: [], errors: [], decisions: [] }
  const texts = messages.map((m) => `${m.content}\n${m.tool_calls?.map((c) => c.function.arguments).join('\n') ?? ''}`)
  // Newest first: the last messages' lines before the earlier ones', then the previous summary's.
  const lines = texts
    .flatMap((t) => t.split('\n'))
    .map((l) => l.trim())
    .filter(Boolean)
    .reverse()
  const paths = unique([...[...texts].reverse().flatMap(pathsIn), ...before.paths], MAX.paths)
  const errors = unique([...lines.filter(isErrorLine).map((l) => clip(l, 240)), ...before.errors], MAX.errors)
  const decisions = unique([...lines.filter((l) => DECISION.test(l)).map((l) => clip(l, 240)), ...before.decisions], MAX.decisions)
  const tools = new Map<string, number>()
  for (const m of messages) {
    for (const c of m.tool_calls ?? []) tools.set(c.function.name, (tools.get(c.function.name) ?? 0) + 1)
    if (m.role === 'tool' && m.tool_name && !m.tool_calls) tools.set(m.tool_name, tools.get(m.tool_name) ?? 1)
  }
  const lastAssistant = [...messages].reverse().find((m) => m.role === 'assistant' && m.content.trim() !== '')
  const first = messages[0]?.seq
  const last = messages.at(-1)?.seq
  const work = unique(
    [
      `Summarized messages ${first ?? '-'}-${last ?? '-'} (${messages.length} messages, extractive: no LLM was used)${tools.size ? `; tools used: ${[...tools].map(([name, n]) => `${name} ×${n}`).join(', ')}` : ''}`,
      ...before.work,
    ],
    MAX.work,
  )
  return [
    '## Original Task',
    task ? task.content : '(not found in the summarized messages)',
    '',
    '## Completed Work',
    ...work.map((w) => `- ${w}`),
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

function isErrorLine(line: string): boolean {
  return ERROR.test(line) && !NO_FAILURE.test(line)
}

function pathsIn(text: string): string[] {
  return (text.match(PATH) ?? []).filter((p) => p.includes('/') || !PRODUCT.test(p))
}

/** The items of a summary in the four sections; text outside them counts as work done. */
function factsOf(summary: string): Facts {
  const facts: Facts = { work: [], paths: [], errors: [], decisions: [] }
  let section = ''
  for (const raw of summary.split('\n')) {
    const line = raw.trim()
    const heading = /^##\s+(.*)$/.exec(line)
    if (heading) {
      section = (heading[1] ?? '').toLowerCase()
      continue
    }
    if (line === '' || section.startsWith('original task') || section.startsWith('current state')) continue
    const item = line.replace(/^[-*]\s+/, '')
    if (item.startsWith('Files: ')) facts.paths.push(...item.slice(7).split(', ').filter(Boolean))
    else if (item.startsWith('Error: ')) facts.errors.push(item.slice(7))
    else if (item.startsWith('Decision: ')) facts.decisions.push(item.slice(10))
    else if (section.startsWith('key discoveries')) {
      facts.paths.push(...pathsIn(item))
      if (isErrorLine(item)) facts.errors.push(clip(item, 240))
      else if (DECISION.test(item)) facts.decisions.push(clip(item, 240))
    } else facts.work.push(clip(item, 400))
  }
  return facts
}

function unique(items: string[], max: number): string[] {
  return [...new Set(items)].slice(0, max)
}
