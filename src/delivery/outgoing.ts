import { secretNamesIn } from '../storage/format/mask.js'
import type { Staged } from './stage.js'

/**
 * Why what a push of `commit` would send must not leave (docs/delivery.md#secrets), one
 * line per object that holds a secret (empty: nothing): every object reachable from it
 * that none of the remote's `tips` reaches — commits and tags whole (messages, author
 * lines), trees by their entries' paths, blobs whole — except the blobs of the change's
 * own files, whose added lines `refusals` has scanned already (the rest of such a file is
 * the forge's). Named, never shown.
 */
export async function outgoingRefusals(staged: Staged, commit: string, tips: readonly string[]): Promise<string[]> {
  // Tips the staging directory does not have (a branch pushed by someone else) say nothing here: ignored.
  const known = await present(staged, tips)
  const listed = await staged.run(['rev-list', '--objects', '--stdin'], { input: `${[commit, ...known.map((t) => `^${t}`)].join('\n')}\n` })
  const scanned = new Set(staged.files.map((f) => f.blob))
  const ids: string[] = []
  const paths = new Set<string>()
  for (const line of listed.split('\n')) {
    if (line === '') continue
    const space = line.indexOf(' ')
    const id = space < 0 ? line : line.slice(0, space)
    if (space >= 0) paths.add(line.slice(space + 1))
    if (!scanned.has(id)) ids.push(id)
  }
  const out: string[] = []
  const inPaths = secretNamesIn([...paths].join('\n'))
  if (inPaths.length > 0) out.push(`a path the push would send holds ${inPaths.join(', ')}`)
  for (const object of await contents(staged, ids)) {
    const names = secretNamesIn(object.text)
    if (names.length > 0) out.push(`the ${object.type} ${object.id.slice(0, 12)} the push would send holds ${names.join(', ')}`)
  }
  return out
}

async function present(staged: Staged, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return []
  const checked = await staged.run(['cat-file', '--batch-check=%(objectname) %(objecttype)'], { input: `${ids.join('\n')}\n` })
  return checked
    .split('\n')
    .map((line) => line.split(' '))
    .filter(([, type]) => type === 'commit' || type === 'tag')
    .map(([id]) => id as string)
}

/** The commits, tags and blobs among `ids`, each with its whole text (trees are scanned by path). */
async function contents(staged: Staged, ids: readonly string[]): Promise<{ id: string; type: string; text: string }[]> {
  if (ids.length === 0) return []
  const raw = Buffer.from(await staged.run(['cat-file', '--batch'], { input: `${ids.join('\n')}\n`, encoding: 'latin1' }), 'latin1')
  const out: { id: string; type: string; text: string }[] = []
  let at = 0
  while (at < raw.length) {
    const end = raw.indexOf(0x0a, at)
    if (end < 0) break
    const [id, type, size] = raw.subarray(at, end).toString('utf8').split(' ')
    const length = Number(size)
    if (!Number.isFinite(length)) break
    const body = raw.subarray(end + 1, end + 1 + length)
    at = end + 1 + length + 1
    if (type !== 'tree') out.push({ id: id as string, type: type as string, text: body.toString('utf8') })
  }
  return out
}
