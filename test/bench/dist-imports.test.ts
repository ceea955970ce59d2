import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

/**
 * The benchmarks load the build (dist/, tsc's output of src/) by path, out of the type
 * checker's sight: a source file moved or split leaves a bench importing a module the build
 * no longer has, and `npm run bench` fails only when someone runs it. Each such import is
 * read here and mapped back to its source (dist/x.js ← src/x.ts), which must exist.
 */
const ROOT = join(import.meta.dirname, '..', '..')
const BENCH = join(ROOT, 'bench')

/** The dist/ modules a bench file names: `'../dist/a/b.js'` and `join(ROOT, 'dist', 'a', 'b.js')`. */
function distImports(text: string): string[] {
  const found: string[] = []
  for (const m of text.matchAll(/['"]\.\.\/dist\/([^'"]+\.js)['"]/g)) found.push(m[1] as string)
  for (const m of text.matchAll(/join\(\s*ROOT\s*,\s*'dist'((?:\s*,\s*'[^']+')+)\s*\)/g))
    found.push([...(m[1] as string).matchAll(/'([^']+)'/g)].map((p) => p[1]).join('/'))
  return found
}

describe('the benchmarks', () => {
  const files = readdirSync(BENCH).filter((f) => f.endsWith('.mjs'))

  it('import only dist/ modules whose source exists', () => {
    const missing: string[] = []
    let seen = 0
    for (const file of files) {
      for (const module of distImports(readFileSync(join(BENCH, file), 'utf8'))) {
        seen++
        if (!existsSync(join(ROOT, 'src', module.replace(/\.js$/, '.ts')))) missing.push(`bench/${file}: dist/${module}`)
      }
    }
    expect(missing).toEqual([])
    // The two forms above are how the benches name the build; a bench written another way is not checked.
    expect(seen).toBeGreaterThan(10)
  })

  it('read both ways a bench names a module', () => {
    expect(distImports(`import { a } from '../dist/context/prune.js'\nawait import(join(ROOT, 'dist', 'fleet', 'jobs.js'))`)).toEqual([
      'context/prune.js',
      'fleet/jobs.js',
    ])
  })
})
