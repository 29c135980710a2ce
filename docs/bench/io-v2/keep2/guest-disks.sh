# shellcheck shell=bash
# Two empty virtio disks (vmhost --disk): the database's ext4 and another one.
set -e
for d in vdb:/mnt/db vdc:/mnt/other; do
  dev=/dev/${d%%:*}; mnt=${d#*:}
  mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev"
  mkdir -p "$mnt"; mount "$dev" "$mnt"
done
cat /sys/block/vdb/queue/scheduler /sys/block/vdb/queue/wbt_lat_usec /sys/block/vdb/queue/rotational
set +e
