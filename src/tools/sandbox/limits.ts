import { readFileSync } from 'node:fs'
export { DEFAULT_LIMITS } from '../../config/fixed.js'

/** tools.limits: what one command (and everything it starts) may use. */
export interface CommandLimits {
  memory_mb: number
  processes: number
  file_size_mb: number
  open_files: number
  cpu_seconds: number
}

export const PRLIMIT = '/usr/bin/prlimit'

const MB = 1024 * 1024

/** Hard limits of this process by /proc/self/limits name; a limit cannot be raised above them without privilege. */
function hardLimits(): Map<string, number> {
  const out = new Map<string, number>()
  try {
    for (const line of readFileSync('/proc/self/limits', 'utf8').split('\n').slice(1)) {
      const m = /^(.+?)\s{2,}(\S+)\s+(\S+)/.exec(line)
      if (m?.[1] && m[3] && /^\d+$/.test(m[3])) out.set(m[1], Number(m[3]))
    }
  } catch {
    // No /proc: prlimit reports a limit it cannot set.
  }
  return out
}

/**
 * prlimit's arguments (up to and including `--`): soft and hard limit alike, so the
 * command cannot raise its own (CPU time: the hard one a second later). RLIMIT_DATA, not RLIMIT_AS: V8 and WebAssembly reserve
 * large PROT_NONE regions that RLIMIT_AS counts and RLIMIT_DATA does not. Values above
 * ctxagent's own hard limit are lowered to it (only root could raise them).
 */
export function prlimitArgs(l: CommandLimits): string[] {
  const hard = hardLimits()
  const cap = (name: string, v: number) => Math.min(v, hard.get(name) ?? v)
  return [
    PRLIMIT,
    `--data=${cap('Max data size', l.memory_mb * MB)}`,
    `--nproc=${cap('Max processes', l.processes)}`,
    `--fsize=${cap('Max file size', l.file_size_mb * MB)}`,
    `--nofile=${cap('Max open files', l.open_files)}`,
    // One second between soft and hard: at the soft limit SIGXCPU (which says why), at the hard one SIGKILL.
    `--cpu=${cap('Max cpu time', l.cpu_seconds)}:${cap('Max cpu time', l.cpu_seconds + 1)}`,
    '--',
  ]
}

/** One line for `doctor` and the docs. */
export function describeLimits(l: CommandLimits): string {
  return `limits: memory ${l.memory_mb} MB, ${l.processes} processes, files up to ${l.file_size_mb} MB, ${l.open_files} open files, ${l.cpu_seconds} s CPU`
}

const OUT_OF_MEMORY = /Cannot allocate memory|Out of memory|out of memory|ENOMEM|std::bad_alloc/
const OUT_OF_PROCESSES = /Resource temporarily unavailable|fork: retry|EAGAIN|Cannot fork|can't fork/

/**
 * What a command's ending says about a limit it reached, as a line for the model (null
 * when nothing points at one): the signal the kernel sends at a limit, or an error in
 * its output that a limit causes.
 */
export function limitReached(l: CommandLimits, signal: NodeJS.Signals | null, output: string): string | null {
  if (signal === 'SIGXCPU' || /CPU time limit exceeded/.test(output)) return `CPU time limit (tools.limits.cpu_seconds = ${l.cpu_seconds}) reached`
  if (signal === 'SIGXFSZ' || /File size limit exceeded|File too large|EFBIG/.test(output))
    return `file size limit (tools.limits.file_size_mb = ${l.file_size_mb}) reached`
  const memory = OUT_OF_MEMORY.test(output)
  const processes = OUT_OF_PROCESSES.test(output)
  if (!memory && !processes) return null
  return `limits in force: memory ${l.memory_mb} MB (tools.limits.memory_mb), ${l.processes} processes and threads (tools.limits.processes); an error above may be one of them reached`
}
