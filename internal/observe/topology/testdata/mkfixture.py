#!/usr/bin/env python3
"""Builds the fixture sysfs and /dev trees the resolver tests walk.

The layout copies what Linux 6.x shows (Documentation/ABI/stable/sysfs-block,
sysfs-class-block, dm and loop attributes), reduced to the files the
resolver reads: class/block/<name> symlinks into devices/, "partition",
"slaves/", "dm/name", "dm/uuid", "loop/backing_file", dev/block/MAJ:MIN.
Run from this directory: ./mkfixture.py (it rewrites sys/ and dev/).
"""
import os, shutil

root = os.path.dirname(os.path.abspath(__file__))
sys_ = os.path.join(root, "sys")
dev = os.path.join(root, "dev")
for d in (sys_, dev):
    shutil.rmtree(d, ignore_errors=True)

ata = "devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block"
virt = "devices/virtual/block"
devices = {}  # name -> (sysfs dir relative to sys, "MAJ:MIN")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def block(name, rel, majmin):
    d = os.path.join(sys_, rel)
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "dev"), majmin + "\n")
    write(os.path.join(d, "size"), "2097152\n")
    devices[name] = (rel, majmin)
    return d


def disk(name, majmin):
    return block(name, f"{ata}/{name}", majmin)


def part(diskname, name, majmin, n):
    d = block(name, f"{ata}/{diskname}/{name}", majmin)
    write(os.path.join(d, "partition"), f"{n}\n")


def dm(name, majmin, dmname, uuid, slaves):
    d = block(name, f"{virt}/{name}", majmin)
    write(os.path.join(d, "dm/name"), dmname + "\n")
    write(os.path.join(d, "dm/uuid"), uuid + "\n")
    os.makedirs(os.path.join(d, "slaves"), exist_ok=True)
    for s in slaves:
        os.symlink(os.path.relpath(os.path.join(sys_, devices[s][0]), os.path.join(d, "slaves")),
                   os.path.join(d, "slaves", s))
        hd = os.path.join(sys_, devices[s][0], "holders")
        os.makedirs(hd, exist_ok=True)
        os.symlink(os.path.relpath(d, hd), os.path.join(hd, name))


def loop(name, majmin, backing):
    d = block(name, f"{virt}/{name}", majmin)
    write(os.path.join(d, "loop/backing_file"), backing + "\n")
    write(os.path.join(d, "loop/dio"), "1\n")
    os.makedirs(os.path.join(d, "slaves"), exist_ok=True)  # empty, as the kernel shows


# Partitions: sda1 exported directly, sda2 holds LUN image files.
disk("sda", "8:0")
part("sda", "sda1", "8:1", 1)
part("sda", "sda2", "8:2", 2)
# LVM volume group "data" over two disks; two LVs, one on each disk only.
disk("sdb", "8:16")
disk("sdc", "8:32")
dm("dm-0", "253:0", "data-lun1", "LVM-AAAAaaaaBBBBbbbbCCCCccccDDDDddddEEEEeeeeFFFFffffGGGGgggg", ["sdb", "sdc"])
dm("dm-1", "253:1", "data-lun2", "LVM-AAAAaaaaBBBBbbbbCCCCccccDDDDddddHHHHhhhhIIIIiiiiJJJJjjjj", ["sdc"])
# Nested dm: a crypt device over an LV of VG "my-vg" (dashes doubled) on sdd.
disk("sdd", "8:48")
dm("dm-2", "253:2", "my--vg-secure--lv", "LVM-KKKKkkkkLLLLllllMMMMmmmmNNNNnnnnOOOOooooPPPPppppQQQQqqqq", ["sdd"])
dm("dm-3", "253:3", "luks-secure", "CRYPT-LUKS2-0123456789abcdef0123456789abcdef-luks-secure", ["dm-2"])
# Loop devices over image files on the partition sda2 (mounted at /srv/images).
loop("loop0", "7:0", "/srv/images/a.img")
loop("loop1", "7:1", "/srv/images/b.img (deleted)")
# Loop devices over image files on a FUSE mount (the lab's emulated disk).
loop("loop2", "7:2", "/mnt/sanqos disk/c.img")
loop("loop3", "7:3", "/mnt/sanqos disk/d.img")
# Software RAID md0 over partitions of two disks; an LV-less export of it.
disk("sdf", "8:80")
part("sdf", "sdf1", "8:81", 1)
disk("sdg", "8:96")
part("sdg", "sdg1", "8:97", 1)
d = block("md0", f"{virt}/md0", "9:0")
write(os.path.join(d, "md/level"), "raid1\n")
os.makedirs(os.path.join(d, "slaves"))
for s in ("sdf1", "sdg1"):
    os.symlink(os.path.relpath(os.path.join(sys_, devices[s][0]), os.path.join(d, "slaves")), os.path.join(d, "slaves", s))
# A disk nobody shares with, exported whole.
disk("sde", "8:64")

for name, (rel, majmin) in devices.items():
    cb = os.path.join(sys_, "class/block")
    os.makedirs(cb, exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(sys_, rel), cb), os.path.join(cb, name))
    db = os.path.join(sys_, "dev/block")
    os.makedirs(db, exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(sys_, rel), db), os.path.join(db, majmin))

# /dev: nodes are empty files (names are what the resolver needs), udev's
# symlinks are real symlinks.
for name in devices:
    write(os.path.join(dev, name), "")
os.makedirs(os.path.join(dev, "mapper"))
os.symlink("../dm-0", os.path.join(dev, "mapper/data-lun1"))
os.symlink("../dm-1", os.path.join(dev, "mapper/data-lun2"))
os.symlink("../dm-3", os.path.join(dev, "mapper/luks-secure"))
os.makedirs(os.path.join(dev, "data"))
os.symlink("../dm-0", os.path.join(dev, "data/lun1"))
os.makedirs(os.path.join(dev, "disk/by-id"))
os.symlink("../../sde", os.path.join(dev, "disk/by-id/wwn-0x5000c500a1b2c3d4"))
