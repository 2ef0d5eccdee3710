package sampler

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"github.com/fsdpbench/fsdpbench/results"
)

// CSVHeader is the header of samples.csv. Units are in the names; a cell the
// device did not report is empty, never 0.
var CSVHeader = []string{
	"time_s", "repeat", "device", "mem_used_bytes", "util_gpu_pct", "power_w",
	"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s",
}

// WriteCSV writes samples as samples.csv (CSVHeader, one row per sample). time_s
// counts from the start of the sample's repeat; device is the run's device index in
// CUDA_VISIBLE_DEVICES order.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, s := range samples {
		row := []string{
			strconv.FormatFloat(s.TimeS, 'f', 3, 64),
			strconv.Itoa(s.Repeat),
			strconv.Itoa(s.Device),
			intCell(s.MemUsedBytes),
			floatCell(s.UtilGPUPct, -1),
			floatCell(s.PowerW, 3),
			floatCell(s.PCIeTxBytesPerS, 0),
			floatCell(s.PCIeRxBytesPerS, 0),
			floatCell(s.NVLinkTxBytesPerS, 0),
			floatCell(s.NVLinkRxBytesPerS, 0),
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteFile stores samples at path atomically (temp file + rename), so a reader
// never sees half a file.
func WriteFile(path string, samples []Sample) error {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, samples); err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := results.WriteFileAtomic(path, buf.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func intCell(v *int64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatInt(*v, 10)
}

func floatCell(v *float64, prec int) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}
