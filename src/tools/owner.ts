import { fchownSync, fstatSync, lchownSync } from 'node:fs'

/*
 * As root, the file tools write into a workspace that belongs to the user commands run
 * as (docs/security.md): what they create gets the owner and group of the directory it
 * is created in, so that a command can change what the model wrote. A process that is
 * not root creates files as itself, the same user its commands run as: nothing to do.
 */

const root = () => process.getuid?.() === 0

/** Gives the open file `fd` the owner of the directory `dirFd` (or `like`, the file it replaces). */
export function ownLikeDir(fd: number, dirFd: number, like: { uid: number; gid: number } | null = null): void {
  if (!root()) return
  const { uid, gid } = like ?? fstatSync(dirFd)
  fchownSync(fd, uid, gid)
}

/** Gives `path` (a directory just made under `dirFd`, never followed if a link) the owner of `dirFd`. */
export function ownPathLikeDir(path: string, dirFd: number): void {
  if (!root()) return
  const { uid, gid } = fstatSync(dirFd)
  lchownSync(path, uid, gid)
}
