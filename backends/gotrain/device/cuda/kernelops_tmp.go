package cuda

import "github.com/fsdpbench/fsdpbench/backends/gotrain/device"

func (d *Device) notYet(op string) { panic(d.name + ": " + op + ": kernel not wired yet") }

func (d *Device) Add(dst, src device.Buffer, alpha float32)                             { d.notYet("Add") }
func (d *Device) Scale(x device.Buffer, alpha float32)                                  { d.notYet("Scale") }
func (d *Device) Sum(x device.Buffer) float64                                           { d.notYet("Sum"); return 0 }
func (d *Device) SumSquares(x device.Buffer) float64                                    { d.notYet("SumSquares"); return 0 }
func (d *Device) EmbeddingForward(out, table device.Buffer, tokens []int32, dim int)    { d.notYet("") }
func (d *Device) EmbeddingBackward(dtable, dout device.Buffer, tokens []int32, dim int) { d.notYet("") }
func (d *Device) RMSNormForward(out, rstd, x, weight device.Buffer, rows, dim int, eps float32) {
	d.notYet("")
}
func (d *Device) RMSNormBackward(dx, dweight, dout, x, weight, rstd device.Buffer, rows, dim int) {
	d.notYet("")
}
func (d *Device) RoPEForward(x device.Buffer, s device.RoPEShape)                      { d.notYet("") }
func (d *Device) RoPEBackward(dx device.Buffer, s device.RoPEShape)                    { d.notYet("") }
func (d *Device) AttentionForward(out, lse, q, k, v device.Buffer, s device.AttnShape) { d.notYet("") }
func (d *Device) AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse device.Buffer, s device.AttnShape) {
	d.notYet("")
}
func (d *Device) SwiGLUForward(out, gate, up device.Buffer)               { d.notYet("") }
func (d *Device) SwiGLUBackward(dgate, dup, dout, gate, up device.Buffer) { d.notYet("") }
func (d *Device) CrossEntropyForward(losses, logits device.Buffer, targets []int32, vocab int) {
	d.notYet("")
}
func (d *Device) CrossEntropyBackward(dlogits, logits device.Buffer, targets []int32, vocab int, scale float32) {
	d.notYet("")
}
func (d *Device) AdamW(params, grads, m, v device.Buffer, c device.AdamWConfig) { d.notYet("") }
