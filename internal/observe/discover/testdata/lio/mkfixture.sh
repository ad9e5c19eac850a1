#!/bin/bash
# mkfixture.sh builds the LIO configfs fixture tree (target/) by hand: no
# LIO in this kernel, so it follows the layout in the kernel sources
# (target_core_configfs.c, iscsi_target_configfs.c) and targetcli: LUN
# links point six levels up into target/core, and acls/<iqn>/info has the
# text lio_target_nacl_info_show prints.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf target
r=target
mkdir -p $r/core/iblock_0/data-lun1 $r/core/fileio_1/img-a $r/core/iblock_0/whole-sde $r/iscsi/discovery_auth
echo "/dev/mapper/data-lun1" >$r/core/iblock_0/data-lun1/udev_path
echo "/srv/images/a.img" >$r/core/fileio_1/img-a/udev_path
echo "/dev/sde" >$r/core/iblock_0/whole-sde/udev_path
for d in data-lun1 whole-sde; do echo 1 >$r/core/iblock_0/$d/enable; done
echo 1 >$r/core/fileio_1/img-a/enable
echo "Target Engine Core ConfigFS Infrastructure v5.0 on Linux/x86_64 on 6.18" >$r/core/../version 2>/dev/null || true
echo "Datera Inc. iSCSI Target v4.1.0" >$r/iscsi/lio_version

lun() { # tpg lun_N hba/object
	mkdir -p "$1/lun/$2"
	ln -s "../../../../../../target/core/$3" "$1/lun/$2/$(echo "$3" | md5sum | cut -c1-10)"
}

# Target A: two LUNs; one initiator logged in, one ACL without a session.
a=$r/iscsi/iqn.2003-01.org.linux-iscsi.sanqos.x8664:sn.aaaa/tpgt_1
mkdir -p $a/np/192.0.2.1:3260 $a/acls
echo 1 >$a/enable
lun $a lun_0 iblock_0/data-lun1
lun $a lun_1 fileio_1/img-a
h1=$a/acls/iqn.1994-05.com.redhat:host1
mkdir -p $h1/lun_0 $h1/lun_1
cat >$h1/info <<'INFO'
InitiatorName: iqn.1994-05.com.redhat:host1
InitiatorAlias: host1
LIO Session ID: 1   ISID: 0x00023d000001  TSIH: 1  SessionType: Normal
Session State: TARG_SESS_STATE_LOGGED_IN
---------------------[iSCSI Session Values]-----------------------
  CmdSN/WR  :  CmdSN/WC  :  ExpCmdSN  :  MaxCmdSN  :     ITT    :     TTT
 0x00000010   0x00000010   0x00001f53   0x00001f62   0x531f0000   0x00000d81
----------------------[iSCSI Connections]-------------------------
CID: 0  Connection State: TARG_CONN_STATE_LOGGED_IN
   Address 192.0.2.11 TCP  StatSN: 0x1a00d3e6
INFO
h2=$a/acls/iqn.1994-05.com.redhat:host2
mkdir -p $h2
echo "No active iSCSI Session for Initiator Endpoint: iqn.1994-05.com.redhat:host2" >$h2/info

# Target B: disabled portal group (ignored even with a session).
b=$r/iscsi/iqn.2003-01.org.linux-iscsi.sanqos.x8664:sn.bbbb/tpgt_1
mkdir -p $b/acls/iqn.1994-05.com.redhat:host9
echo 0 >$b/enable
lun $b lun_0 iblock_0/whole-sde
cp $h1/info $b/acls/iqn.1994-05.com.redhat:host9/info

# Target C: one initiator with two connections (MC/S), IPv4 and IPv6.
c=$r/iscsi/iqn.2003-01.org.linux-iscsi.sanqos.x8664:sn.cccc/tpgt_1
mkdir -p $c/acls/iqn.1994-05.com.redhat:host3
echo 1 >$c/enable
lun $c lun_0 iblock_0/whole-sde
cat >$c/acls/iqn.1994-05.com.redhat:host3/info <<'INFO'
InitiatorName: iqn.1994-05.com.redhat:host3
InitiatorAlias: 
LIO Session ID: 3   ISID: 0x00023d000003  TSIH: 3  SessionType: Normal
Session State: TARG_SESS_STATE_LOGGED_IN
---------------------[iSCSI Session Values]-----------------------
  CmdSN/WR  :  CmdSN/WC  :  ExpCmdSN  :  MaxCmdSN  :     ITT    :     TTT
 0x00000020   0x00000020   0x00000020   0x0000003f   0x20000000   0x00000001
----------------------[iSCSI Connections]-------------------------
CID: 0  Connection State: TARG_CONN_STATE_LOGGED_IN
   Address 192.0.2.13 TCP  StatSN: 0x00000100
CID: 1  Connection State: TARG_CONN_STATE_LOGGED_IN
   Address 2001:db8::13 TCP  StatSN: 0x00000200
INFO
