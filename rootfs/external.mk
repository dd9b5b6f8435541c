include $(sort $(wildcard $(BR2_EXTERNAL_SVCOS_PATH)/package/*/*.mk))
