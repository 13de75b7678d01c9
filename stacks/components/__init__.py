"""rackform's Pulumi components: a site, its building blocks, switch groups and stages."""
