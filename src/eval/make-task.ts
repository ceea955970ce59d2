import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { stringify } from 'yaml'
import type { Config } from '../config/schema.js'
import { git } from '../delivery/git.js'
import { stripMarkers } from '../sources/marker.js'
import type { MergedChange } from '../sources/merged-change.js'
import { oneLine, quoted } from '../sources/quote.js'
import { CHECK_FILES, checkCommandOf, isTestPath } from './make-rules.js'
import { fetchInto } from './mirror.js'

/** What a made task was made of, for the report. */
export interface MadeTask {
  commit: string
  check: string
  check_from: string
  tests: string[]
}

/**
 * Writes the task of one merged change into the empty directory `dir` (docs/eval.md#making-a-suite):
 * task.yaml (the statement, the clone URL, the change's merge base, the check command),
 * tests/ (the test files the change added or changed, as they are at its head) and
 * solution.patch (the rest of its diff). Returns why not, when the change makes no task.
 * `mirror`: the bare clone of `url`, into which the change's head is fetched.
 */
export async function makeTask(change: MergedChange, mirror: string, url: string, dir: string, config: Config): Promise<MadeTask | string> {
  const tests = change.files.filter((f) => !f.removed && isTestPath(f.path))
  const code = change.files.filter((f) => !isTestPath(f.path) || (f.previous !== null && !isTestPath(f.previous)))
  if (tests.length === 0) return 'it changed no test file'
  if (code.length === 0) return 'it changed only test files: there is no fix to make'
  const at = { safeDir: mirror, cwd: mirror }
  const head = `refs/ctxagent-eval/${change.number}`
  const fetched = await fetchInto(mirror, url, change.head_ref, head, config).then(
    () => null,
    (err: Error) => err.message,
  )
  if (fetched !== null) return `its head ${change.head_ref} could not be fetched: ${fetched}`
  const headSha = (await git(['rev-parse', '--verify', '--end-of-options', `${head}^{commit}`], at)).trim()
  if (headSha !== change.head_sha) return `its head ${change.head_ref} is ${headSha.slice(0, 12)}, not the ${change.head_sha.slice(0, 12)} the forge reports`
  const base =
    change.base_sha ??
    (await git(['merge-base', '--end-of-options', change.base_tip, headSha], at).then(
      (s) => s.trim(),
      () => null,
    ))
  if (base === null || !/^[0-9a-f]{40,64}$/.test(base)) return `the merge base of ${change.base_tip.slice(0, 12)} and its head is not in the repository`
  const files = new Map<string, string>()
  for (const path of CHECK_FILES) {
    const text = await blob(mirror, base, path)
    if (text !== null) files.set(path, text.toString('utf8'))
  }
  const check = checkCommandOf((path) => files.get(path) ?? null)
  if (check === null)
    return 'no check command: its repository has no .ctxagent/environment.yml test key, and no package.json test script, go.mod, Cargo.toml, pytest file or Makefile test target'
  const placed: string[] = []
  for (const file of tests) {
    const bytes = await blob(mirror, headSha, file.path)
    // A link or a submodule is no file to place.
    if (bytes === null) continue
    const target = join(dir, 'tests', file.path)
    mkdirSync(dirname(target), { recursive: true })
    writeFileSync(target, bytes)
    placed.push(file.path)
  }
  if (placed.length === 0) return 'its test files are links or submodules, not files'
  const codePaths = [...new Set(code.flatMap((f) => (f.previous === null ? [f.path] : [f.path, f.previous])))].filter((p) => !isTestPath(p))
  const solution = await git(
    ['diff', '--binary', '--no-renames', '--no-ext-diff', '--no-textconv', '--end-of-options', base, headSha, '--', ...codePaths.map((p) => `:(literal)${p}`)],
    { ...at, encoding: 'latin1' },
  )
  if (solution.trim() === '') return 'its code changes are empty against its merge base'
  writeFileSync(join(dir, 'solution.patch'), Buffer.from(solution, 'latin1'))
  writeFileSync(join(dir, 'task.yaml'), stringify({ statement: statementOf(change), repo: url, commit: base, check: check.command }, { lineWidth: 0 }))
  return { commit: base, check: check.command, check_from: check.from, tests: placed }
}

/** The task's statement: the text of the issues the change closes, else its own title and body; every word from the forge quoted, no marker of ctxagent's kept. */
export function statementOf(change: MergedChange): string {
  const kind = change.ref.includes('!') ? 'Merge request' : 'Pull request'
  const parts =
    change.closes.length > 0
      ? change.closes.map((issue) => section(`Issue ${issue.ref}`, issue.title, issue.body))
      : [section(`${kind} ${change.ref}`, change.title, change.body)]
  return parts.join('\n\n')
}

function section(what: string, title: string, body: string): string {
  const text = stripMarkers(body).trim()
  return `# ${what}: ${oneLine(stripMarkers(title))}\n\n${text === '' ? '(no description)' : quoted(text)}`
}

/** A regular file's bytes at a commit; null when the path is absent there, or a link or a submodule. */
async function blob(mirror: string, commit: string, path: string): Promise<Buffer | null> {
  const at = { safeDir: mirror, cwd: mirror }
  const listed = await git(['ls-tree', '-z', '--full-tree', '--end-of-options', commit, '--', path], at).catch(() => '')
  // "<mode> <type> <object>\t<path>": the entry of exactly this path (ls-tree also matches a directory's).
  const entry = listed.split('\0').find((e) => e.slice(e.indexOf('\t') + 1) === path)
  const mode = entry?.split(' ')[0]
  if (mode !== '100644' && mode !== '100755') return null
  const text = await git(['cat-file', 'blob', `${commit}:${path}`], { ...at, encoding: 'latin1' })
  return Buffer.from(text, 'latin1')
}
