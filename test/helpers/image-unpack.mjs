// Unpacks one image into a store (obtainImage, as a task does), then says what it got on
// stdout as one JSON line. A test kills it with SIGKILL while it is in the middle of a layer.
import { obtainImage } from '../../dist/workspace/environment/image.js'

const [path, store] = process.argv.slice(2)
const got = await obtainImage({ path, store, identity: null, hidden: [] })
process.stdout.write(`${JSON.stringify(got)}\n`)
