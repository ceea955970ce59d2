export { Invoice } from './invoice.js'
export { renderInvoice, renderLines, renderTotals } from './format.js'
export { dueDate, dueStatus, parseDate } from './dates.js'
export { formatAmount, parseAmount, percentOf, roundHalfUp } from './money.js'
export { RATES, computeVat, rateFor } from './tax.js'

import { Invoice } from './invoice.js'
import { renderInvoice } from './format.js'

/** Invoice.prototype.render, so that `invoice.render()` reads naturally. */
Invoice.prototype.render = function render() {
  return renderInvoice(this)
}
