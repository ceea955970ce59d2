import * as f from '/work/wt/dispatch/bench/fleet.mjs'
const rows = await f.run()
console.log(JSON.stringify(rows, null, 1))
