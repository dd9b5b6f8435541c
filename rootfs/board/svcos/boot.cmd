# U-Boot boot script of the svcOS image: RAUC's boot-count scheme.
# BOOT_ORDER lists the slots, first tried first; BOOT_<slot>_LEFT counts the attempts a slot has
# left. A slot is tried only while it has attempts; each try uses one up before the kernel
# starts, so a slot that hangs or resets before the updater marks it good (rauc mark-good, which
# refills the counter) runs out and the next slot in BOOT_ORDER boots.
test -n "${BOOT_ORDER}" || setenv BOOT_ORDER "A B"
test -n "${BOOT_A_LEFT}" || setenv BOOT_A_LEFT 3
test -n "${BOOT_B_LEFT}" || setenv BOOT_B_LEFT 3

setenv bootpart
setenv raucslot
for BOOT_SLOT in "${BOOT_ORDER}"; do
  if test "x${bootpart}" != "x"; then
    # already chosen
  elif test "x${BOOT_SLOT}" = "xA"; then
    if test ${BOOT_A_LEFT} -gt 0; then
      setexpr BOOT_A_LEFT ${BOOT_A_LEFT} - 1
      echo "svcOS: booting slot A (${BOOT_A_LEFT} attempts left after this one)"
      setenv bootpart "/dev/mmcblk0p2"
      setenv mmcpart 2
      setenv raucslot "A"
    fi
  elif test "x${BOOT_SLOT}" = "xB"; then
    if test ${BOOT_B_LEFT} -gt 0; then
      setexpr BOOT_B_LEFT ${BOOT_B_LEFT} - 1
      echo "svcOS: booting slot B (${BOOT_B_LEFT} attempts left after this one)"
      setenv bootpart "/dev/mmcblk0p3"
      setenv mmcpart 3
      setenv raucslot "B"
    fi
  fi
done

if test -n "${bootpart}"; then
  setenv bootargs "console=${console} root=${bootpart} rootwait ro rauc.slot=${raucslot}"
  saveenv
else
  echo "svcOS: no slot has attempts left; refilling and retrying from the top"
  setenv BOOT_A_LEFT 3
  setenv BOOT_B_LEFT 3
  saveenv
  reset
fi

load mmc 0:${mmcpart} ${kernel_addr_r} /boot/zImage
load mmc 0:${mmcpart} ${fdt_addr_r} /boot/${fdtfile}
bootz ${kernel_addr_r} - ${fdt_addr_r}
