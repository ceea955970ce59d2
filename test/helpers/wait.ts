import type { ChildProcess } from 'node:child_process'

/** Resolves with the first stdout line of `child` that matches `pattern`. */
export function lineFrom(child: ChildProcess, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = ''
    const onData = (d: Buffer) => {
      buffer += d.toString()
      for (const line of buffer.split('\n')) {
        if (pattern.test(line)) {
          child.stdout?.off('data', onData)
          resolve(line)
          return
        }
      }
    }
    child.stdout?.on('data', onData)
    child.once('exit', (code) => reject(new Error(`child exited (${code}) before printing ${pattern}`)))
  })
}

export function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve({ code: child.exitCode, signal: child.signalCode })
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Whether a process exists (a zombie counts until its parent reaps it). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Whether any process of group `pgid` is left (kill(-pgid, 0)). */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

/** SIGKILL to a whole process group, if anything of it is left. */
export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL')
  } catch {
    // gone already
  }
}

/**
 * Waits for an event of another process (polled every `everyMs`), never for a time:
 * `tries` × `everyMs` is only the give-up point. A probe that throws counts as not yet.
 */
export async function until<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  tries = 1200,
  everyMs = 50,
): Promise<T> {
  for (let i = 0; ; i++) {
    const value = await Promise.resolve()
      .then(probe)
      .catch(() => null)
    if (value) return value
    if (i > tries) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}
