package diskmodel

import (
	"fmt"
	"strings"
)

// Profiles returns the names of the built-in profiles.
func Profiles() []string { return []string{"thesis-2010", "ssd", "ram", "raid6-hdd", "cloud-3000"} }

// ProfileByName returns a built-in profile.
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "thesis-2010":
		// Ten 36 GB 10k rpm SCSI disks (HP SC10 shelf) on one SCSI
		// adapter, striped by LVM in 64 KiB units (thesis §3.1, Table
		// 3.2). Seek and media figures are those of 10k rpm disks of that
		// generation (Seagate Cheetah 36LP: 4.9 ms average, 0.5 ms track
		// to track, ~45 MB/s media); 1 ms per command covers the SCSI
		// command phases, LVM and the target's block path.
		// Calibrated against the thesis (checked by internal/sim's
		// TestCalibration): BusMBs 44.5 is the shared channel's nominal
		// rate, of which this model's gap-filling arbitration leaves about
		// 87 %, so 12 sequential 64 KiB sync writers reach 37–39 MB/s
		// (Fig. 5.10, 5.13); the 1.5 MiB write-back cache stands for the
		// target's dirty page cache and is what makes the 8 KiB random
		// reader wait ~50 ms (30–120 in Fig. 5.7) behind the writers
		// instead of ~5 ms alone. The look-ahead is the Cheetah's 4 MB
		// buffer in 8 segments of 512 KiB; with it one sequential 64 KiB
		// reader gets ~22 MB/s and four share the channel (Figs. 5.1, 5.5).
		return Profile{
			Name: name, Spindles: 10, StripeBytes: 64 << 10, DiskBytes: 36e9,
			RPM: 10000, AvgSeekMs: 4.9, TrackToTrackMs: 0.5,
			TransferMBs: 45, BusMBs: 44.5, CommandOverheadMs: 1.0,
			ReadAheadBytes: 512 << 10, ReadAheadSegments: 8,
			QueueDepth: 1, CacheBytes: 1536 << 10, CacheAckMs: 0.2,
		}, nil
	case "ssd":
		// A modern SATA SSD: ~0.1 ms reads, ~500 MB/s on the SATA link,
		// 8 channels with 4 dies each, a DRAM write cache.
		return Profile{
			Name: name, Spindles: 8, StripeBytes: 16 << 10, DiskBytes: 64e9,
			TransferMBs: 100, BusMBs: 520, CommandOverheadMs: 0.07,
			WriteOverheadMs: 0.2, QueueDepth: 4,
			CacheBytes: 64 << 20, CacheAckMs: 0.03,
		}, nil
	case "ram":
		return Profile{Name: name, Spindles: 1, StripeBytes: 1 << 20, DiskBytes: 1 << 40, NoLatency: true}, nil
	case "raid6-hdd":
		// A midrange RAID-6 array: 8 × 4 TB 7.2k rpm NL-SAS disks (8.5 ms
		// average seek, ~180 MB/s media), 64 KiB stripe units, six data
		// and two parity units a row, behind a 1 GiB battery-backed
		// write-back cache that acknowledges in 0.1 ms and destages in
		// the background, four destages at a time (enough to keep the
		// eight spindles busy with three-spindle read-modify-writes),
		// merging contiguous dirty data into whole rows. Each disk has
		// its own SAS lane: no shared channel. While the cache has room,
		// writes cost nothing and a random read waits ~13 ms plus the
		// destage in progress on its spindle; once it has filled, small
		// random writes run at the array's read-modify-write rate (a
		// 4 KiB write is six operations, ~150 a second for the array)
		// and sequential ones at the full-stripe rate. Checked by
		// TestRAID6Calibration.
		return Profile{
			Name: name, Spindles: 8, ParityDisks: 2, StripeBytes: 64 << 10, DiskBytes: 4e12,
			RPM: 7200, AvgSeekMs: 8.5, TrackToTrackMs: 0.8,
			TransferMBs: 180, CommandOverheadMs: 0.5, QueueDepth: 1,
			CacheBytes: 1 << 30, CacheAckMs: 0.1, DestageDepth: 4, CoalesceBytes: 16 * 6 * 64 << 10,
		}, nil
	case "cloud-3000":
		// A cloud block volume provisioned at 3000 IOPS and 125 MB/s
		// (an EBS gp3 at its baseline; GCP's and Azure's equivalents):
		// a distributed, replicated back end far faster than its caps,
		// every request paying a network and replication floor (0.8 ms
		// reads, 1 ms writes) and passing two token buckets that hold a
		// tenth of a second of each rate (300 I/Os, 12.5 MB); I/Os count
		// in units of 256 KiB, as gp3 counts them. Below the caps the
		// latency is the floor whatever the queue; at a cap, it is the
		// queue's length over the cap (Little). Checked by
		// TestCloudCalibration.
		return Profile{
			Name: name, Spindles: 16, StripeBytes: 256 << 10, DiskBytes: 64e9,
			TransferMBs: 400, CommandOverheadMs: 0.8, WriteOverheadMs: 0.2, QueueDepth: 16,
			IOPSCap: 3000, IOPSBurst: 300, IOUnitBytes: 256 << 10,
			ThroughputCapMBs: 125, ThroughputBurstBytes: 12_500_000,
		}, nil
	}
	return Profile{}, fmt.Errorf("unknown disk profile %q (known: %s)", name, strings.Join(Profiles(), ", "))
}
