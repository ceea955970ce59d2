/**
 * The part of TOML a Harbor task.toml needs here (docs/eval.md#harbor-tasks): no TOML
 * parser is among ctxagent's dependencies, and only a few keys are read. Read: `[table]`
 * and `[a.b]` headers, and `key = value` lines whose value is a basic string ("…", with
 * \" \\ \n \t \uXXXX escapes), a literal string ('…'), an integer, a float or a
 * boolean, for the keys asked for. Every other line is skipped unread (its value may be
 * anything TOML allows: inline tables, arrays, multi-line strings on lines of their own);
 * a key asked for whose value is none of these is an error naming its line.
 */
export type TomlValue = string | number | boolean

/** The values of `wanted` (`table.key`; a top-level key is `.key`) found in the text. */
export function readTomlKeys(text: string, wanted: readonly string[]): Map<string, TomlValue> {
  const found = new Map<string, TomlValue>()
  let table = ''
  for (const [i, raw] of text.split(/\r?\n/).entries()) {
    const line = raw.trim()
    const header = /^\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?$/.exec(line)
    if (header) {
      table = header[1] as string
      continue
    }
    const pair = /^([A-Za-z0-9_-]+)\s*=\s*(.+)$/.exec(line)
    if (!pair || !wanted.includes(`${table}.${pair[1]}`)) continue
    const value = scalar(pair[2] as string)
    if (value === undefined) throw new Error(`task.toml line ${i + 1}: ${table}.${pair[1]} is not a string, number or boolean (docs/eval.md#harbor-tasks)`)
    found.set(`${table}.${pair[1]}`, value)
  }
  return found
}

function scalar(text: string): TomlValue | undefined {
  const basic = /^"((?:[^"\\]|\\.)*)"\s*(#.*)?$/.exec(text)
  if (basic) return unescaped(basic[1] as string)
  const literal = /^'([^']*)'\s*(#.*)?$/.exec(text)
  if (literal) return literal[1] as string
  const plain = /^([^#\s]+)\s*(#.*)?$/.exec(text)?.[1]
  if (plain === 'true' || plain === 'false') return plain === 'true'
  if (plain !== undefined && /^[+-]?(\d[\d_]*)(\.\d[\d_]*)?([eE][+-]?\d+)?$/.test(plain)) return Number(plain.replaceAll('_', ''))
  return undefined
}

function unescaped(s: string): string | undefined {
  let bad = false
  const out = s.replace(/\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)/g, (_, e: string) => {
    if (e.length > 1) return String.fromCodePoint(Number.parseInt(e.slice(1), 16))
    const known: Record<string, string> = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', '"': '"', '\\': '\\' }
    if (known[e] === undefined) bad = true
    return known[e] ?? ''
  })
  return bad ? undefined : out
}
