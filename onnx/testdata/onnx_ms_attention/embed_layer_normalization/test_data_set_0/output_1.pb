*B
mask_index