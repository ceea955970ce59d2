/**
 * Whether a `--repo` ref may be given to git: a branch, tag or commit name, never
 * something git would read as an option (`-f`, `--merge`) or a revision range.
 */
export function validRef(ref: string): boolean {
  return /^[\w./-]{1,200}$/.test(ref) && !ref.startsWith('-') && !ref.includes('..') && !ref.endsWith('.lock') && !ref.endsWith('/') && !ref.endsWith('.')
}
