import { chmodSync, lchownSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'

/** The uid and gid tests give their workspaces as root: nobody's (Debian: 65534:65534). */
export const SANDBOX_UID = 65534
export const SANDBOX_GID = 65534

function chownTree(path: string, uid: number, gid: number): void {
  lchownSync(path, uid, gid)
  let names: string[] = []
  try {
    names = readdirSync(path)
  } catch {
    return
  }
  for (const name of names) chownTree(join(path, name), uid, gid)
}

/**
 * As root, run_command runs commands as the workspace's owner (or nobody), who must be
 * able to reach and write it: a test workspace made by root is given to nobody, and its
 * parent (a 0700 temp directory) made searchable. Not root: nothing to do.
 */
export function giveToSandbox(ws: string, parent: string | null = dirname(ws)): void {
  if (process.getuid?.() !== 0) return
  if (parent !== null && parent !== '/tmp') chmodSync(parent, 0o711)
  chownTree(ws, SANDBOX_UID, SANDBOX_GID)
}
