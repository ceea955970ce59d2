// Appends `count` records tagged `writer` with appendShared (inbox.jsonl's and audit.jsonl's
// writer), as its own process; prints "ready" first and waits for a line on stdin to start,
// so that every writer starts together.
import { appendShared } from '../../dist/storage/format/jsonl.js'

const [file, writer, count] = process.argv.slice(2)
process.stdout.write('ready\n')
process.stdin.once('data', () => {
  for (let i = 0; i < Number(count); i++) appendShared(file, { writer, i, pad: 'x'.repeat((i * 7919) % 5000) })
  process.stdout.write('done\n')
  process.exit(0)
})
