import { readdirSync, readFileSync } from 'node:fs'

function readProc(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return '' // gone meanwhile
  }
}

/** Host pids whose command line holds `token` (a process a test or a sandbox left behind shows here). */
export function pidsHolding(token: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name) && readProc(`/proc/${name}/cmdline`).includes(token))
    .map(Number)
}

/** The parent of `pid` (field 4 of /proc/<pid>/stat, read after the command name's last ')'), or null when it is gone. */
function parentOf(pid: number): number | null {
  const stat = readProc(`/proc/${pid}/stat`)
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return stat === '' ? null : Number(fields[1])
}

/**
 * SIGKILLs `pids` and every descendant of theirs: a `sh -c 'sleep …'` the test found by its
 * command line has a `sleep` child whose own command line does not hold the token, and that
 * child would otherwise outlive the test (a setsid'd one is in no group the test can name).
 */
export function killWithDescendants(pids: readonly number[]): void {
  const all = readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number)
  const doomed = new Set(pids)
  for (let grew = true; grew; ) {
    grew = false
    for (const pid of all) {
      const parent = parentOf(pid)
      if (!doomed.has(pid) && parent !== null && doomed.has(parent)) doomed.add(pid), (grew = true)
    }
  }
  for (const pid of doomed) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // Already gone.
    }
  }
}
