import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'

// The repository stands alone (docs/development.md): every link between its documents, and
// every docs/ section a comment cites, must lead somewhere in it.

const root = resolve(import.meta.dirname, '..', '..')
const withoutCode = (text: string) => text.replace(/```[\s\S]*?```/g, '')

/** GitHub's anchors: the heading lower-cased, punctuation dropped, spaces as hyphens; a repeat gets -1, -2… */
function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>()
  const anchors = new Set<string>()
  for (const m of withoutCode(readFileSync(file, 'utf8')).matchAll(/^#{1,6}\s+(.*)$/gm)) {
    const slug = (m[1] ?? '')
      .replaceAll('`', '')
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-')
    const n = seen.get(slug) ?? 0
    seen.set(slug, n + 1)
    anchors.add(n === 0 ? slug : `${slug}-${n}`)
  }
  return anchors
}

const walk = (dir: string, keep: (p: string) => boolean): string[] =>
  readdirSync(dir).flatMap((name) => {
    const p = join(dir, name)
    return statSync(p).isDirectory() ? walk(p, keep) : keep(p) ? [p] : []
  })

const documents = [
  join(root, 'README.md'),
  join(root, 'BENCHMARKS.md'),
  join(root, 'bench', 'notes.md'),
  ...walk(join(root, 'docs'), (p) => p.endsWith('.md')),
].filter((p) => existsSync(p))
const code = ['src', 'test', 'bench', 'scripts'].flatMap((dir) => walk(join(root, dir), (p) => /\.(ts|mjs)$/.test(p)))

describe('the repository stands alone', () => {
  it('every relative link in README.md and docs/ names a file that exists, and a heading in it', () => {
    const broken: string[] = []
    for (const doc of documents) {
      for (const m of withoutCode(readFileSync(doc, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = m[1] ?? ''
        if (/^[a-z][a-z+.-]*:/i.test(link)) continue
        const [path = '', anchor] = link.split('#')
        const target = path === '' ? doc : resolve(dirname(doc), path)
        if (!existsSync(target)) broken.push(`${relative(root, doc)}: ${link} (no such file)`)
        else if (anchor !== undefined && target.endsWith('.md') && !anchorsOf(target).has(anchor))
          broken.push(`${relative(root, doc)}: ${link} (no such heading)`)
      }
    }
    expect(broken).toEqual([])
  })

  it('every docs/<file>.md#<heading> and docs/contract.md §N a comment cites exists', () => {
    const sections = new Set([...readFileSync(join(root, 'docs', 'contract.md'), 'utf8').matchAll(/^#{1,4}\s+§?(\d+(?:\.\d+)*)/gm)].map((m) => m[1]))
    const broken: string[] = []
    for (const file of code) {
      const text = readFileSync(file, 'utf8')
      // Not a path inside a string (a fixture's docs/…), only a citation.
      for (const m of text.matchAll(/(?<!['"/\w])docs\/([a-z-]+\.md)(?:#([a-z0-9-]+))?/g)) {
        const doc = join(root, 'docs', m[1] ?? '')
        if (!existsSync(doc)) broken.push(`${relative(root, file)}: ${m[0]} (no such file)`)
        else if (m[2] !== undefined && !anchorsOf(doc).has(m[2])) broken.push(`${relative(root, file)}: ${m[0]} (no such heading)`)
      }
      for (const m of text.matchAll(/docs\/contract\.md §(\d+(?:\.\d+)*)/g))
        if (!sections.has(m[1])) broken.push(`${relative(root, file)}: contract §${m[1]} (no such section)`)
    }
    expect(broken).toEqual([])
  })
})
