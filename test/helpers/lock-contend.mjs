// Takes and releases one task lock `rounds` times; inside, holds an O_EXCL marker
// file that a second owner at the same moment could not create.
import { closeSync, openSync, unlinkSync } from 'node:fs'
import { join } from 'node:path'
import { TaskLock } from '../../dist/storage/lock/lock.js'

const [dir, rounds] = process.argv.slice(2)
const marker = join(dir, 'owner.marker')
let held = 0
while (held < Number(rounds)) {
  let lock
  try {
    lock = await TaskLock.acquire(dir, { staleAfterMs: 60_000 })
  } catch (err) {
    if (err.exitCode !== 4) throw err
    await new Promise((r) => setTimeout(r, Math.random() * 2))
    continue
  }
  let fd
  try {
    fd = openSync(marker, 'wx')
  } catch {
    process.stdout.write('VIOLATION\n')
    process.exit(3)
  }
  closeSync(fd)
  unlinkSync(marker)
  await lock.release()
  held++
}
process.stdout.write(`held ${held}\n`)
