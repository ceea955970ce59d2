import picomatch from 'picomatch'
import { secretNamesIn } from '../storage/format/mask.js'
import { addedText } from './stage.js'
import type { Staged } from './stage.js'

/** What may not leave in a commit (docs/delivery.md#secrets). */
export interface DeliveryRules {
  exclude: readonly string[]
  maxFileBytes: number | null
}

/**
 * Why the staged change must not be delivered, one line per problem (empty: nothing):
 * a path matching `exclude` (on the whole path or its file name), a file over the size
 * limit, and the lines the change adds (and the path itself) holding the value of a
 * secret in force or a masking rule's key pattern, named, never shown.
 */
export async function refusals(staged: Staged, base: string, rules: DeliveryRules): Promise<string[]> {
  const excluded = rules.exclude.map((glob) => ({ glob, match: picomatch(glob, { dot: true }) }))
  const out: string[] = []
  for (const file of staged.files) {
    const name = file.path.split('/').pop() ?? file.path
    const glob = excluded.find((e) => e.match(file.path) || e.match(name))
    if (glob) {
      out.push(`${file.path} matches deliver.exclude (${glob.glob})`)
      continue
    }
    if (rules.maxFileBytes !== null && file.size > rules.maxFileBytes) {
      out.push(`${file.path} is ${file.size} bytes, over deliver.max_file_bytes (${rules.maxFileBytes})`)
      continue
    }
    const names = secretNamesIn(`${file.path}\n${await addedText(staged, base, file.path)}`)
    if (names.length > 0) out.push(`${file.path} holds ${names.join(', ')}`)
  }
  return out
}
