/**
 * A strict parser of the Prometheus text exposition format (0.0.4), for the tests: every
 * sample belongs to a family declared by # HELP and # TYPE before it, names and labels
 * are well formed, label values escaped, values numbers, and no sample repeats.
 */
export interface Sample {
  name: string
  labels: Record<string, string>
  value: number
}

export interface Family {
  name: string
  help: string
  type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped'
  samples: Sample[]
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('\n')) throw new Error('the exposition does not end with a newline')
  const families = new Map<string, Family>()
  const seen = new Set<string>()
  let current: Family | null = null
  text
    .slice(0, -1)
    .split('\n')
    .forEach((line, i) => {
      const where = `line ${i + 1}: ${line}`
      if (line === '') return
      if (line.startsWith('# HELP ')) {
        const [, name, help] = /^# HELP (\S+) (.*)$/.exec(line) ?? []
        if (!name || !NAME.test(name) || families.has(name)) throw new Error(`bad or repeated HELP, ${where}`)
        current = { name, help: help ?? '', type: 'untyped', samples: [] }
        families.set(name, current)
        return
      }
      if (line.startsWith('# TYPE ')) {
        const [, name, type] = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line) ?? []
        if (!name || current === null || current.name !== name) throw new Error(`TYPE without its HELP, ${where}`)
        current.type = type as Family['type']
        return
      }
      if (line.startsWith('#')) return
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
      if (m === null) throw new Error(`not a sample, ${where}`)
      const [, name, labelText, valueText] = m as unknown as [string, string, string | undefined, string]
      const family = current as Family | null
      if (family === null) throw new Error(`a sample before any family, ${where}`)
      const suffixes = family.type === 'histogram' ? ['_bucket', '_sum', '_count'] : family.type === 'summary' ? ['', '_sum', '_count'] : ['']
      if (!suffixes.some((s) => name === family.name + s)) throw new Error(`sample ${name} outside its family ${family.name}, ${where}`)
      const labels = parseLabels(labelText ?? '', where)
      const value = valueText === '+Inf' ? Infinity : valueText === '-Inf' ? -Infinity : valueText === 'NaN' ? NaN : Number(valueText)
      if (!/^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]Inf|NaN)$/.test(valueText)) throw new Error(`bad value, ${where}`)
      const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`
      if (seen.has(key)) throw new Error(`repeated sample, ${where}`)
      seen.add(key)
      family.samples.push({ name, labels, value })
    })
  return families
}

function parseLabels(text: string, where: string): Record<string, string> {
  const labels: Record<string, string> = {}
  let rest = text
  while (rest !== '') {
    const m = /^([^=]+)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/.exec(rest)
    if (m === null) throw new Error(`bad labels, ${where}`)
    const [all, name, raw] = m as unknown as [string, string, string]
    if (!LABEL.test(name) || name in labels) throw new Error(`bad or repeated label ${name}, ${where}`)
    labels[name] = raw.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
    rest = rest.slice(all.length)
  }
  return labels
}

/** The sum of a family's samples named `name` whose labels include `match`. */
export function total(families: Map<string, Family>, family: string, match: Record<string, string> = {}, name = family): number {
  const f = families.get(family)
  if (f === undefined) throw new Error(`no family ${family}`)
  return f.samples.filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0)
}
