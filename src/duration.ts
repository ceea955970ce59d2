import { UsageError } from './errors.js'

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 7 * 86_400_000,
}

const MAX_DURATION_MS = 100 * 365 * 86_400_000

/**
 * Parses `90s`, `5m`, `6h`, `7d`, `2w`, `1h30m` (or a bare number of seconds) into
 * milliseconds. `what` names the option in the error message.
 */
export function parseDuration(text: string, what: string): number {
  const trimmed = text.trim()
  const total = /^\d+(\.\d+)?$/.test(trimmed) ? Number(trimmed) * 1000 : sumOfParts(trimmed, text, what)
  if (total > MAX_DURATION_MS) throw new UsageError(`${what}: '${text}' is longer than 100 years`, 'give a shorter duration')
  return Math.round(total)
}

/** `1h30m` as milliseconds; a usage error when any of it is not a number with a unit. */
function sumOfParts(trimmed: string, text: string, what: string): number {
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy
  let total = 0
  let consumed = 0
  for (let match = part.exec(trimmed); match; match = part.exec(trimmed)) {
    total += Number(match[1]) * (UNIT_MS[match[2] as string] as number)
    consumed = part.lastIndex
  }
  if (trimmed === '' || consumed !== trimmed.length) {
    throw new UsageError(`${what}: '${text}' is not a duration`, 'use forms like 90s, 5m, 6h, 7d or 1h30m')
  }
  return total
}

export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '-'
  const s = Math.round(ms / 1000)
  if (s < 60) return `${s}s`
  const m = Math.floor(s / 60)
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`
  const h = Math.floor(m / 60)
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, '0')}m`
  return `${Math.floor(h / 24)}d ${h % 24}h`
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB']
  let value = bytes
  let unit = 0
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]}`
}

/** Whether `text` parses as a positive duration (for config validation, which reports its own message). */
export function isDuration(text: string): boolean {
  try {
    return parseDuration(text, 'duration') > 0
  } catch {
    return false
  }
}
