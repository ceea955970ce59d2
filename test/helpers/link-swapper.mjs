// Swaps <ws>/d between a real directory of the workspace and a symlink to an outside
// directory, as fast as it can, until killed: the race a path check-then-use loses.
import { renameSync } from 'node:fs'
import { join } from 'node:path'

const [ws] = process.argv.slice(2)
const d = join(ws, 'd')
const realdir = join(ws, 'realdir')
const link = join(ws, 'link')
const swap = (from, to) => {
  try {
    renameSync(from, to)
  } catch {
    // Lost a race with our own previous step: go on.
  }
}
process.stdout.write('ready\n')
for (;;) {
  swap(realdir, d)
  swap(d, realdir)
  swap(link, d)
  swap(d, link)
}
