// Appends messages forever through MessageStore until killed; says "ready" once started.
import { MessageStore } from '../../dist/storage/task/message-store.js'

const [dir] = process.argv.slice(2)
const store = MessageStore.open(dir)
let i = 0
for (;;) {
  store.add({ role: i % 2 ? 'assistant' : 'tool', content: `step ${i} `.repeat(1 + ((i * 31) % 900)) })
  if (++i === 200) process.stdout.write('ready\n')
  if (i % 500 === 0) await new Promise((r) => setImmediate(r))
}
