import { clip } from '../text.js'

// How a config's keys and values are written into a one-line error (load.ts, schema.ts, cross-check.ts).

/** A key path as `a.b[0].c`, each key printable (control characters escaped) and cut to a sane length. */
export function formatPath(path: readonly PropertyKey[]): string {
  return path.map((key, i) => (typeof key === 'number' ? `[${key}]` : `${i === 0 ? '' : '.'}${shownKey(String(key))}`)).join('')
}

/** A key as written, or JSON-quoted when it is empty, has outer spaces, or holds a quote or whitespace other than a space. */
export function shownKey(key: string): string {
  const plain = key !== '' && key === key.trim() && !/[^\S ]|"/.test(key)
  return shown(plain ? key : JSON.stringify(key), 60)
}

/** Text for a one-line message: control characters escaped, cut to `max` characters. */
export function shown(value: string, max: number): string {
  const printable = value.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  return clip(printable, max)
}
