import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { gunzipSync } from 'node:zlib'
import Database from 'better-sqlite3'
import { Layout } from '../../src/storage/fs/layout.js'

/** What every torture suite asserts of a task tree after the damage. */

/** Where each task is: uuid → location (a task in two places, or gone, changes this). */
export function taskPlaces(base: string): Record<string, string> {
  const layout = new Layout(base)
  const places: Record<string, string> = {}
  for (const location of ['running', 'paused', 'completed'] as const) {
    for (const uuid of layout.list(location)) places[uuid] = places[uuid] === undefined ? location : `${places[uuid]}+${location}`
  }
  return places
}

function files(base: string): string[] {
  const out: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else out.push(path)
    }
  }
  walk(base)
  return out
}

/** Temp files of atomic writes, half-written archives: nothing of the kind may stay. */
export function litter(base: string): string[] {
  return files(base)
    .filter((f) => /\.tmp$/.test(f) || relative(base, f).startsWith('.trash/'))
    .map((f) => relative(base, f))
}

/**
 * Blob references (`[blob:<id>]`) in a task's messages, window or tool records whose blob
 * is not in its blobs/ (plain or gzipped): a blob is written before the message that
 * refers to it, so a kill at any instant leaves none.
 */
export function danglingBlobs(base: string): string[] {
  const out: string[] = []
  for (const file of files(base)) {
    const name = relative(base, file)
    if (!/\/(messages|current|tools)\.jsonl(\.gz)?$/.test(name)) continue
    let text = readFileSync(file)
    if (name.endsWith('.gz')) text = gunzipSync(text)
    const dir = join(file, '..')
    for (const match of text.toString('utf8').matchAll(/\[blob:([0-9a-f]{64})\]/g)) {
      const id = match[1] as string
      if (!existsSync(join(dir, 'blobs', id)) && !existsSync(join(dir, 'blobs', `${id}.gz`))) out.push(`${name}: ${id}`)
    }
  }
  return [...new Set(out)]
}

/** Every JSON file parses, every complete JSON Lines line parses, every .gz inflates. */
export function unreadable(base: string): string[] {
  const bad: string[] = []
  for (const file of files(base)) {
    const name = relative(base, file)
    if (/tasks\.db(-wal|-shm)?$|\.lock(\.mutex)?$/.test(name)) continue
    try {
      let text = readFileSync(file)
      if (name.endsWith('.gz')) text = gunzipSync(text)
      const body = text.toString('utf8')
      if (/\.json(\.gz)?$/.test(name)) JSON.parse(body)
      else if (/\.jsonl(\.gz)?$/.test(name)) for (const line of body.split('\n').slice(0, -1)) JSON.parse(line)
    } catch {
      bad.push(name)
    }
  }
  return bad
}

/** tasks.db's rows as uuid → location, to compare with taskPlaces(). */
export function indexedPlaces(base: string): Record<string, string> {
  const db = new Database(join(base, 'tasks.db'), { readonly: true })
  try {
    const rows = db.prepare('SELECT uuid, location FROM tasks').all() as { uuid: string; location: string }[]
    return Object.fromEntries(rows.map((r) => [r.uuid, r.location]))
  } finally {
    db.close()
  }
}

/** A `.lock` left in paused/ or completed/: nobody may hold a task that is not running. */
export function strayLocks(base: string): string[] {
  const layout = new Layout(base)
  const out: string[] = []
  for (const location of ['paused', 'completed'] as const) {
    for (const uuid of layout.list(location)) if (readdirSync(layout.taskDir(location, uuid)).includes('.lock')) out.push(`${location}/${uuid}`)
  }
  return out
}
