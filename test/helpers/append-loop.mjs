// Appends `count` records tagged `writer` to a JSON Lines file, as its own process.
import { JsonlAppender } from '../../dist/storage/format/jsonl.js'

const [file, writer, count] = process.argv.slice(2)
const log = JsonlAppender.open(file, { repair: false })
for (let i = 0; i < Number(count); i++) {
  // Sizes from tens of bytes to ~20 KB, so some writes span several pages.
  log.append({ writer, i, pad: 'x'.repeat((i * 7919) % 20000) })
}
log.close()
