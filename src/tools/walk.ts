/** Directories no tool descends into: version control, dependencies, build output, caches. */
export const SKIPPED_DIRS = new Set([
  '.git',
  '.hg',
  '.svn',
  'node_modules',
  'dist',
  'build',
  'out',
  'target',
  '.venv',
  'venv',
  '__pycache__',
  '.next',
  '.nuxt',
  '.cache',
  'coverage',
  '.tox',
  '.mypy_cache',
  '.pytest_cache',
  '.gradle',
  '.idea',
])

/** True when the first bytes hold a NUL: treated as binary, never shown. */
export function looksBinary(head: Buffer): boolean {
  return head.includes(0)
}
