"""The example ERP app: sales, hotel and company modules, deployed as `erp`."""
