// A task owner: creates a task under <base>, prints its uuid, keeps the heartbeat
// running and (mode "write") appends a message every 20 ms. Exits 7 when its lock
// is taken from it.
import { parseConfig } from '../../dist/config/load.js'
import { Layout } from '../../dist/storage/fs/layout.js'
import { appendInbox } from '../../dist/storage/task/inbox.js'
import { createTask } from '../../dist/storage/task/lifecycle.js'

const [base, mode = 'idle', heartbeat = '0.2'] = process.argv.slice(2)
const config = parseConfig(`locks:\n  heartbeat_seconds: ${heartbeat}\n`)
const env = { layout: new Layout(base), config, index: null, now: () => new Date(), warn: (m) => process.stderr.write(`${m}\n`) }
const handle = await createTask(
  env,
  { task_key: { task_source: 'local', owner: 'me', repo: 'demo', task_type: 'task', task_id: '1' }, user: 'tester' },
  {
    onLost: () => {
      process.stdout.write('lost\n')
      process.exit(7)
    },
  },
)
await handle.setStatus('processing')
// "chat-idle": a chat session idle for an hour whose owner never reads its inbox.
// Like run --chat, it starts its inbox with the hidden session marker.
if (mode === 'chat-idle') {
  appendInbox(handle.dir, { kind: 'message', sender: 'ctxagent', content: '[chat session started by tester]', visible: false })
  await handle.update({ session: { state: 'active', last_activity_at: new Date(Date.now() - 3_600_000).toISOString() } })
}
process.stdout.write(`${handle.uuid}\n`)
setInterval(() => {
  if (mode !== 'write') return
  try {
    handle.addMessage({ role: 'assistant', content: 'working' })
  } catch (err) {
    process.stdout.write(`lost: ${err.message}\n`)
    process.exit(7)
  }
}, 20)
